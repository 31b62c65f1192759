/**
 * What each Redis store call costs the Redis server, beside the Redis floor's commands
 * (bench/floors.ts): `INFO commandstats` µs per call, read after a batch of one kind of
 * call only (claims of new keys, completions, claims of completed keys), so each figure
 * is one script's. The server's time is part of every round trip's latency, the part no
 * client-side work can remove: on one connection, where requests never queue, it is added
 * to a first execution's p50 as it is.
 *
 *   node -r ./test/support/ts-require.js bench/redis-script-cost.ts [--calls 20000] [--rounds 3]
 *   BENCH_LIB=/tmp/before/lib node -r ./test/support/ts-require.js bench/redis-script-cost.ts
 *
 * REDIS_URL (default redis://127.0.0.1:6379) names the server; its statistics are reset
 * (`CONFIG RESETSTAT`) before each batch, so run it on a Redis nothing else measures.
 */
import { randomBytes } from 'node:crypto';
import { Redis } from 'ioredis';
import { numberArg } from './args.js';
import { describeLib, loadLibModule } from './lib.js';
import { median, round } from './stats.js';
import type * as RedisModule from '../lib/redis/index.js';

const { RedisIdempotencyStore } = loadLibModule<typeof RedisModule>('redis/index.ts');

const calls = numberArg('calls', 20_000);
const rounds = numberArg('rounds', 3);
/** Calls in flight at once: enough to keep the server busy, so its per-call time is not idle wake-ups. */
const IN_FLIGHT = 50;
const FINGERPRINT = 'f'.repeat(64);
const RESULT = JSON.stringify({ k: 'r', status: 201, body: { id: 'ch_1', amount: 4200, status: 'succeeded' } });

/** Server µs per call of `command` during `work`, from INFO commandstats. */
async function serverMicros(admin: Redis, command: string, work: () => Promise<void>): Promise<number> {
  await admin.config('RESETSTAT');
  await work();
  const stats = (await admin.info('commandstats')) as string;
  const match = new RegExp(`^cmdstat_${command}:calls=(\\d+),usec=(\\d+)`, 'm').exec(stats);
  return match ? Number(match[2]) / Number(match[1]) : Number.NaN;
}

/** Runs `call(i)` for i in [0, n), `IN_FLIGHT` at a time. */
async function inFlight(n: number, call: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (next < n) await call(next++);
    }),
  );
}

async function main(): Promise<void> {
  const url = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const client = new Redis(url);
  const admin = new Redis(url);
  const prefix = `bench:script-cost:${process.pid}:`;
  const store = new RedisIdempotencyStore(client, { prefix });
  const figures: Record<string, number[]> = {};
  const version = /redis_version:(\S+)/.exec((await admin.info('server')) as string)?.[1] ?? '?';
  const note = (name: string, micros: number) => (figures[name] ??= []).push(micros);
  try {
    for (let r = 0; r < rounds; r++) {
      const keys = Array.from({ length: calls }, () => randomBytes(12).toString('hex'));
      const tokens = keys.map(() => randomBytes(16).toString('hex'));
      note(
        'library: claim of a new key (CLAIM script)',
        await serverMicros(admin, 'evalsha', () =>
          inFlight(calls, (i) => store.claim(keys[i], { token: tokens[i], leaseTtl: 30_000, fingerprint: FINGERPRINT })),
        ),
      );
      note(
        'library: completion (COMPLETE script)',
        await serverMicros(admin, 'evalsha', () =>
          inFlight(calls, (i) => store.complete(keys[i], tokens[i], { result: RESULT, ttl: 60_000 })),
        ),
      );
      note(
        'library: claim of a completed key, a replay (CLAIM script)',
        await serverMicros(admin, 'evalsha', () =>
          inFlight(calls, (i) =>
            store.claim(keys[i], { token: randomBytes(16).toString('hex'), leaseTtl: 30_000, fingerprint: FINGERPRINT }),
          ),
        ),
      );
      const floorKey = (i: number) => `${prefix}floor:${keys[i]}`;
      note(
        'floor: claim, SET NX PX GET',
        await serverMicros(admin, 'set', () =>
          inFlight(calls, (i) => client.call('SET', floorKey(i), `${FINGERPRINT}\n\n`, 'NX', 'PX', 30_000, 'GET')),
        ),
      );
      note(
        'floor: completion, SET XX PX',
        await serverMicros(admin, 'set', () =>
          inFlight(calls, (i) => client.call('SET', floorKey(i), `${FINGERPRINT}\n201\n${RESULT}`, 'XX', 'PX', 60_000)),
        ),
      );
      await inFlight(Math.ceil(calls / 500), (batch) =>
        client.del(...keys.slice(batch * 500, batch * 500 + 500).flatMap((key, j) => [prefix + key, floorKey(batch * 500 + j)])),
      );
    }
  } finally {
    client.disconnect();
    admin.disconnect();
  }
  console.log(
    `Redis ${version}, ${describeLib()}: server µs per call (INFO commandstats), ${calls} calls per batch, median of ${rounds} rounds`,
  );
  for (const [name, values] of Object.entries(figures)) {
    console.log(
      `  ${name.padEnd(62)} ${String(round(median(values), 2)).padStart(6)} µs  (rounds: ${values.map((v) => round(v, 2)).join(', ')})`,
    );
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
