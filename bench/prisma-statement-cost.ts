/**
 * App CPU per statement, without HTTP: the same parameterised SELECT from 20 callers through
 * node-postgres (unnamed, and as a named prepared statement) and through Prisma's
 * `$queryRawUnsafe` on `@prisma/adapter-pg` (the path of every PrismaIdempotencyStore
 * statement). Where the Prisma store's extra cost in docs/performance.md comes from:
 *
 *   node -r ./test/support/ts-require.js bench/prisma-statement-cost.ts
 */
import { join } from 'node:path';
import { Pool } from 'pg';
import { PrismaPg } from '@prisma/adapter-pg';
import { generatedClientDir } from '../test/prisma/support.js';
const url = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const SQL = 'SELECT $1::text AS k, now() AS t, $2::int AS n';
async function timed(label: string, fn: (i: number) => Promise<unknown>, n = 4000, conc = 20) {
  for (let i = 0; i < 300; i++) await fn(i);
  const c0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  let i = 0;
  await Promise.all(
    Array.from({ length: conc }, async () => {
      while (i < n) await fn(i++);
    }),
  );
  const c = process.cpuUsage(c0);
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  console.log(
    `${label.padEnd(22)} ${((c.user + c.system) / n).toFixed(0)} µs app CPU/statement, ${((n / ms) * 1000).toFixed(0)} statements/s`,
  );
}
void (async () => {
  const pool = new Pool({ connectionString: url, max: 20 });
  const { PrismaClient } = require(join(generatedClientDir('postgresql'), 'client.ts'));
  const prisma = new PrismaClient({ adapter: new PrismaPg(new Pool({ connectionString: url, max: 20 })) });
  for (let r = 0; r < 2; r++) {
    await timed('pg unnamed', (i) => pool.query(SQL, [`k${i}`, i]));
    await timed('pg named (prepared)', (i) => pool.query({ name: 'b1', text: SQL, values: [`k${i}`, i] }));
    await timed('prisma $queryRawUnsafe', (i) => prisma.$queryRawUnsafe(SQL, `k${i}`, i));
  }
  await prisma.$disconnect();
  await pool.end();
})();
