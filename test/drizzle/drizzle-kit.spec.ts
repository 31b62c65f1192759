import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { DrizzleIdempotencyStore } from '../../lib/drizzle/index.js';
import { createMysqlDrizzle, createPgDrizzle } from './support.js';

const run = promisify(execFile);

/** drizzle-kit's CLI: a devDependency of this repository (or DRIZZLE_KIT_BIN, another one). */
const kit = process.env.DRIZZLE_KIT_BIN ?? resolve(__dirname, '../../node_modules/drizzle-kit/bin.cjs');
const lib = resolve(__dirname, '../../lib/drizzle');

/**
 * What docs/drizzle.md tells a user to do, done: a schema that exports the table
 * definitions, `drizzle-kit generate`, the generated migration applied; the store then
 * passes its boot check on those tables and works.
 */
describe('drizzle-kit generates the store’s tables from the definitions', () => {
  async function generate(dialect: 'postgresql' | 'mysql', exports: string, module: string): Promise<string[]> {
    const dir = mkdtempSync(join(tmpdir(), 'idem-drizzle-kit-'));
    try {
      writeFileSync(join(dir, 'schema.ts'), `export { ${exports} } from ${JSON.stringify(join(lib, module))};\n`);
      await run(process.execPath, [kit!, 'generate', '--dialect', dialect, '--schema', join(dir, 'schema.ts'), '--out', join(dir, 'out')], {
        cwd: dir,
        timeout: 120_000,
      });
      const file = readdirSync(join(dir, 'out')).find((name) => name.endsWith('.sql'))!;
      return readFileSync(join(dir, 'out', file), 'utf8')
        .split('--> statement-breakpoint')
        .map((statement) => statement.trim())
        .filter(Boolean);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  async function works(store: DrizzleIdempotencyStore): Promise<void> {
    await store.verify();
    const key = 'k' + randomUUID().replace(/-/g, '');
    const token = randomUUID();
    expect((await store.claim(key, { token, leaseTtl: 10_000 })).claimed).toBe(true);
    expect(await store.saveStep(key, token, { step: 's1', result: 'one', ttl: 60_000 })).toBe(true);
    expect(await store.complete(key, token, { result: 'done', ttl: 60_000 })).toBe(true);
    expect(await store.get(key)).toMatchObject({ status: 'completed', result: 'done' });
    expect(await store.loadSteps(key)).toEqual({ s1: 'one' });
  }

  it('PostgreSQL', async () => {
    const statements = await generate('postgresql', 'idempotencyRecordsPg, idempotencyStepsPg', 'pg-tables');
    const fixture = await createPgDrizzle();
    try {
      for (const statement of statements) await fixture.pool.query(statement);
      await works(new DrizzleIdempotencyStore(fixture.db));
    } finally {
      await fixture.destroy();
    }
  }, 120_000);

  it('MariaDB', async () => {
    const statements = await generate('mysql', 'idempotencyRecordsMysql, idempotencyStepsMysql', 'mysql-tables');
    expect(statements[0]).toMatch(/`key` varchar\(255\) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL/);
    const fixture = await createMysqlDrizzle();
    try {
      for (const statement of statements) await fixture.pool.query(statement);
      await works(new DrizzleIdempotencyStore(fixture.db));
    } finally {
      await fixture.destroy();
    }
  }, 120_000);
});
