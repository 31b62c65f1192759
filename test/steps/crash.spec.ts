import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { DataSource } from 'typeorm';
import { TypeOrmIdempotencyStore } from '../../lib/typeorm/index.js';
import { mariadbConnection } from '../support/mariadb.js';
import { pgConnection } from '../support/postgres.js';

/**
 * Issue 27: a real process is SIGKILLed between two steps of a refund; once its lease ran
 * out, a retry in another process gets the first step's recorded result, runs only the
 * missing steps and answers; a later retry replays. On Redis, PostgreSQL and MariaDB.
 */
const CHILD = join(__dirname, 'fixtures', 'crash-child.ts');
const TS_REQUIRE = require.resolve('../support/ts-require.js');
const LEASE_TTL = 1_500;

interface Backend {
  env: Record<string, string>;
  dispose(): Promise<void>;
}

async function redisBackend(): Promise<Backend> {
  const prefix = `test:steps-crash:${randomBytes(6).toString('hex')}:`;
  return {
    env: { STEPS_BACKEND: 'redis', STEPS_PREFIX: prefix },
    async dispose() {
      const client = new Redis({ host: '127.0.0.1', port: 6379 });
      const keys = await client.keys(`${prefix}*`);
      if (keys.length > 0) await client.del(...keys);
      client.disconnect();
    },
  };
}

async function sqlBackend(kind: 'postgres' | 'mariadb'): Promise<Backend> {
  const name = `steps_crash_${process.pid}_${randomBytes(4).toString('hex')}`;
  const admin = new DataSource(kind === 'postgres' ? { ...pgConnection, poolSize: 1 } : { ...mariadbConnection, poolSize: 1 });
  await admin.initialize();
  await admin.query(kind === 'postgres' ? `CREATE SCHEMA "${name}"` : `CREATE DATABASE \`${name}\``);
  const dataSource = new DataSource(
    kind === 'postgres' ? { ...pgConnection, schema: name, poolSize: 1 } : { ...mariadbConnection, database: name, poolSize: 1 },
  );
  await dataSource.initialize();
  await new TypeOrmIdempotencyStore(dataSource).ensureTable();
  await dataSource.destroy();
  return {
    env: { STEPS_BACKEND: kind, STEPS_SCHEMA: name },
    async dispose() {
      await admin.query(kind === 'postgres' ? `DROP SCHEMA IF EXISTS "${name}" CASCADE` : `DROP DATABASE IF EXISTS \`${name}\``);
      await admin.destroy();
    },
  };
}

/** Runs the child until it prints a line starting with one of `until`; resolves with that line and the child. */
function runChild(mode: string, env: Record<string, string>, until: string[]) {
  const child = spawn(process.execPath, ['-r', TS_REQUIRE, CHILD, mode], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const line = new Promise<string>((resolve, reject) => {
    let buffered = '';
    const timer = setTimeout(
      () => reject(new Error(`the ${mode} child printed none of ${until.join(', ')} within 30 s: ${stderr}`)),
      30_000,
    );
    child.stdout.on('data', (chunk: Buffer) => {
      buffered += chunk.toString();
      const found = buffered.split('\n').find((l) => until.some((prefix) => l.startsWith(prefix)));
      if (found !== undefined) {
        clearTimeout(timer);
        resolve(found);
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the ${mode} child exited (${code}) before printing ${until.join(', ')}: ${buffered} ${stderr}`));
    });
  });
  return { child, line };
}

/** Retries in fresh processes while the dead process's lease still holds the key (in-flight refusal), up to a deadline. */
async function runUntilAnswered(env: Record<string, string>): Promise<{ result: Record<string, unknown>; pid: number }> {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const { child, line } = runChild('run', env, ['RESULT ', 'ERROR ']);
    const printed = await line.finally(() => child.kill('SIGKILL'));
    if (printed.startsWith('RESULT ')) return { result: JSON.parse(printed.slice('RESULT '.length)), pid: child.pid! };
    if (!printed.includes('IdempotencyInFlightError') || Date.now() > deadline) throw new Error(`the retry failed: ${printed}`);
  }
}

describe.each([
  ['Redis', redisBackend],
  ['PostgreSQL', () => sqlBackend('postgres')],
  ['MariaDB', () => sqlBackend('mariadb')],
] as const)('durable steps across a SIGKILL between two steps (%s)', (_name, open) => {
  let backend: Backend;
  let dir: string;

  beforeAll(async () => {
    backend = await open();
    dir = mkdtempSync(join(tmpdir(), 'steps-crash-'));
  }, 60_000);
  afterAll(async () => {
    await backend?.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the retry in another process resumes after the recorded step, runs only the missing ones, and a later retry replays', async () => {
    const effects = join(dir, 'effects.log');
    writeFileSync(effects, '');
    const env = {
      ...backend.env,
      STEPS_KEY: `order-${randomBytes(4).toString('hex')}`,
      STEPS_EFFECTS: effects,
      STEPS_LEASE_TTL: String(LEASE_TTL),
    };

    const first = runChild('hang-after-charge', env, ['CHARGED']);
    await first.line;
    const exited = new Promise((resolve) => first.child.on('exit', resolve));
    first.child.kill('SIGKILL');
    await exited;
    const killed = first.child.pid!;

    const retry = await runUntilAnswered(env);
    const lines = readFileSync(effects, 'utf8').trim().split('\n');
    expect(lines.filter((l) => l.startsWith('charge '))).toEqual([
      expect.stringMatching(new RegExp(`^charge step_[A-Za-z0-9_-]{43} ${killed}$`)),
    ]);
    expect(lines.filter((l) => l.startsWith('ledger ')).map((l) => l.split(' ')[2])).toEqual([String(retry.pid)]);
    expect(lines.filter((l) => l.startsWith('email ')).map((l) => l.split(' ')[2])).toEqual([String(retry.pid)]);
    // The first step's recorded result: made by the killed process.
    expect(retry.result).toEqual({ chargeId: `ch_${env.STEPS_KEY}`, chargedBy: killed, answeredBy: retry.pid });

    const later = await runUntilAnswered(env);
    expect(later.result).toEqual(retry.result);
    expect(readFileSync(effects, 'utf8').trim().split('\n')).toEqual(lines);
  }, 90_000);
});
