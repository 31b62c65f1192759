/**
 * What a MariaDB replay's claim statement costs, without HTTP: the library's claim of a
 * completed key (the statement every duplicate sends) beside the floor's (bench/floors.ts:
 * `ON DUPLICATE KEY UPDATE key = key RETURNING`), 50 in flight on one mysql2 pool, in
 * alternating rounds. Reports claims per second (mostly the server's cost: client and
 * server share the machine) and the client's CPU per claim, medians over rounds.
 *
 *   node -r ./test/support/ts-require.js bench/mariadb-claim.ts [--claims 20000] [--rounds 5]
 *   BENCH_LIB=/tmp/before/lib node -r ./test/support/ts-require.js bench/mariadb-claim.ts
 *
 * MARIADB_URL (default mysql://root@127.0.0.1:3306/test) names the server.
 */
import { randomBytes } from 'node:crypto';
import { createPool, type Pool } from 'mysql2';
import { numberArg } from './args.js';
import { describeLib, loadLibModule } from './lib.js';
import { median, round } from './stats.js';
import type * as Statements from '../lib/sql/dialects/mysql-statements.js';

const { mysqlStatements, mysqlRecordsTableDdl } = loadLibModule<typeof Statements>('sql/dialects/mysql-statements.ts');

function query(pool: Pool, sql: string, params: unknown[]): Promise<unknown> {
  return new Promise((resolve, reject) => pool.query(sql, params, (error, result) => (error ? reject(error) : resolve(result))));
}

async function measure(pool: Pool, sql: string, params: unknown[], claims: number): Promise<{ perSecond: number; cpuMicros: number }> {
  let sent = 0;
  const cpu = process.cpuUsage();
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: 50 }, async () => {
      while (sent++ < claims) await query(pool, sql, params);
    }),
  );
  const used = process.cpuUsage(cpu);
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return { perSecond: claims / seconds, cpuMicros: (used.user + used.system) / claims };
}

async function main(): Promise<void> {
  const claims = numberArg('claims', 20_000);
  const rounds = numberArg('rounds', 5);
  const pool = createPool({ uri: process.env.MARIADB_URL ?? 'mysql://root@127.0.0.1:3306/test', connectionLimit: 10 });
  const table = `bench_claim_${randomBytes(3).toString('hex')}`;
  const name = { schema: undefined, table, quoted: `\`${table}\`` };
  try {
    for (const ddl of mysqlRecordsTableDdl(name)) await query(pool, ddl, []);
    const statements = mysqlStatements(name, true);
    const first = statements.claim('k', 'token-1', 30_000, 'fp');
    await query(pool, first.sql, first.params);
    const done = statements.complete('k', 'token-1', '{"kind":"value"}', 600_000);
    await query(pool, done.sql, done.params);
    const library = statements.claim('k', 'token-2', 30_000, 'fp');
    const floor = {
      sql: `INSERT INTO \`${table}\` (\`key\`, \`status\`, \`lease_token\`, \`lease_expires_at\`, \`fingerprint\`, \`expires_at\`, \`created_at\`) VALUES (?, 'in_progress', ?, 1, ?, 1, 1)
ON DUPLICATE KEY UPDATE \`key\` = \`key\` RETURNING \`status\`, \`lease_token\`, \`fingerprint\`, \`result\``,
      params: ['k', 'token-3', 'fp'],
    };
    await measure(pool, library.sql, library.params, claims / 4);
    await measure(pool, floor.sql, floor.params, claims / 4);
    const results = { library: [] as { perSecond: number; cpuMicros: number }[], floor: [] as { perSecond: number; cpuMicros: number }[] };
    for (let r = 0; r < rounds; r++) {
      for (const side of r % 2 === 0 ? (['library', 'floor'] as const) : (['floor', 'library'] as const)) {
        const statement = side === 'library' ? library : floor;
        results[side].push(await measure(pool, statement.sql, statement.params, claims));
      }
    }
    console.log(`MariaDB replay claims, ${claims} per round, 50 in flight, ${rounds} rounds; ${describeLib()}`);
    for (const side of ['library', 'floor'] as const) {
      const rows = results[side];
      console.log(
        `${side.padEnd(8)} ${round(median(rows.map((x) => x.perSecond)), 0)} claims/s (${rows.map((x) => round(x.perSecond, 0)).join(', ')}), ` +
          `client CPU ${round(median(rows.map((x) => x.cpuMicros)), 1)} µs/claim`,
      );
    }
  } finally {
    await query(pool, `DROP TABLE IF EXISTS \`${table}\``, []).catch(() => undefined);
    pool.end();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
