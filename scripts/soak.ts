/**
 * Soak run of the invariant harness (not part of `npm test`):
 *
 *   npm run soak                                   # 60 s, Redis store, 2 processes
 *   SOAK_DURATION_MS=300000 SOAK_STORE=typeorm-tx npm run soak
 *
 * Runs N application processes over one store under the randomized load of
 * test/reliability/harness, injects faults at random moments, then settles every key
 * and checks the invariant (at most one effect per key, exactly one per key that got a
 * success, byte-identical successes). Prints a summary; exits 1 on any violation.
 *
 * Environment (all optional):
 * - SOAK_DURATION_MS  load duration, ms. Default 60000.
 * - SOAK_STORE        `redis` (own redis-server, AOF fsync always), `typeorm`
 *                     (PostgreSQL, claim/complete) or `typeorm-tx` (PostgreSQL,
 *                     effect and record in one transaction). Default `redis`.
 * - SOAK_APPS         application processes. Default 2.
 * - SOAK_CONCURRENCY  parallel clients. Default 8.
 * - SOAK_FAULT_EVERY_MS  mean pause between faults, ms. Default 5000.
 * - SOAK_SEED         seed of the load mix (printed, to replay a failure). Default random.
 * - SOAK_CRASH        how application processes are killed: `drained` (new requests
 *                     stop going to the victim, then it is killed while requests sleep
 *                     inside the handler, before their effect) or `undrained` (killed
 *                     wherever its requests are, even between an effect and the store
 *                     write). Default `drained`, except `undrained` for `typeorm-tx`.
 */
import { randomBytes } from 'node:crypto';
import { startRedisServer, type RedisServerHandle } from '../test/support/redis-servers.js';
import { formatStats } from '../test/reliability/harness/invariant.js';
import { HarnessDatabase } from '../test/reliability/harness/postgres.js';
import { HarnessRun, sleep } from '../test/reliability/harness/scenario.js';

type StoreKind = 'redis' | 'typeorm' | 'typeorm-tx';

async function main(): Promise<void> {
  const durationMs = Number(process.env.SOAK_DURATION_MS ?? 60_000);
  const storeKind = (process.env.SOAK_STORE ?? 'redis') as StoreKind;
  const appCount = Number(process.env.SOAK_APPS ?? 2);
  const faultEveryMs = Number(process.env.SOAK_FAULT_EVERY_MS ?? 5_000);
  const seed = process.env.SOAK_SEED ? Number(process.env.SOAK_SEED) : undefined;
  const crash = process.env.SOAK_CRASH ?? (storeKind === 'typeorm-tx' ? 'undrained' : 'drained');
  if (crash !== 'drained' && crash !== 'undrained') throw new Error(`SOAK_CRASH must be drained or undrained, got ${crash}`);
  if (!['redis', 'typeorm', 'typeorm-tx'].includes(storeKind))
    throw new Error(`SOAK_STORE must be redis, typeorm or typeorm-tx, got ${storeKind}`);

  let redis: RedisServerHandle | undefined;
  let db: HarnessDatabase | undefined;
  let env: Record<string, string>;
  if (storeKind === 'redis') {
    redis = await startRedisServer({ args: ['--appendonly', 'yes', '--appendfsync', 'always'] });
    env = { HARNESS_STORE: 'redis', HARNESS_REDIS_PORT: String(redis.port), HARNESS_PREFIX: `soak:${randomBytes(4).toString('hex')}:` };
  } else {
    const id = randomBytes(4).toString('hex');
    db = new HarnessDatabase(`soak_${id}`, `idem-soak-${id}`);
    await db.create();
    env = {
      HARNESS_STORE: 'typeorm',
      HARNESS_PG_SCHEMA: db.schema,
      HARNESS_PG_APP_NAME: db.applicationName,
      HARNESS_TRANSACTIONAL: storeKind === 'typeorm-tx' ? '1' : '0',
    };
  }
  const run = new HarnessRun({
    apps: appCount,
    leaseTtl: 4_000,
    seed,
    concurrency: Number(process.env.SOAK_CONCURRENCY ?? 8),
    env,
    readEffects: storeKind === 'typeorm-tx' ? () => db!.readEffects() : undefined,
  });
  const log = (line: string) => process.stdout.write(`[soak +${((Date.now() - startedAt) / 1000).toFixed(1)}s] ${line}\n`);
  const startedAt = Date.now();
  try {
    await run.start();
    log(`store=${storeKind} apps=${appCount} crash=${crash} seed=${run.seed} duration=${durationMs} ms`);
    run.startLoad();
    const end = Date.now() + durationMs;
    const random = () => Math.random();
    while (Date.now() < end) {
      await sleep(Math.min(end - Date.now(), faultEveryMs / 2 + random() * faultEveryMs));
      if (Date.now() >= end) break;
      const victim = Math.floor(random() * run.apps.length);
      const faults: Array<() => Promise<string>> = [];
      if (crash === 'undrained') {
        faults.push(async () => {
          await run.crash(victim);
          return `SIGKILL app${victim} at a random point (undrained), restarted`;
        });
      } else {
        faults.push(async () => {
          const { hungKeys } = await run.killMidHandler(victim);
          return `SIGKILL app${victim} with ${hungKeys.length} requests mid-handler, restarted`;
        });
      }
      if (redis) {
        faults.push(async () => {
          run.faults.push({ kind: 'redis-sigkill', at: Date.now() });
          await redis!.kill('SIGKILL');
          await sleep(300 + random() * 1_200);
          await redis!.restart();
          return 'SIGKILL redis-server, restarted with its AOF';
        });
      }
      if (db) {
        faults.push(async () => {
          const terminated = await db!.terminateAppConnections();
          run.faults.push({ kind: 'pg-terminate', at: Date.now(), detail: `${terminated} connections` });
          return `pg_terminate_backend: ${terminated} connections`;
        });
      }
      const fault = faults[Math.floor(random() * faults.length)];
      const phase = run.client.phase;
      run.client.phase = 'fault';
      log(await fault());
      run.client.phase = phase;
    }
    log('load stopped; settling every key');
    const report = await run.finish(60_000);
    const faultCounts = run.faults.reduce<Record<string, number>>(
      (counts, f) => ((counts[f.kind] = (counts[f.kind] ?? 0) + 1), counts),
      {},
    );
    const summary = {
      store: storeKind,
      apps: appCount,
      crash,
      seed: run.seed,
      durationMs,
      ...report.stats,
      faults: faultCounts,
      unsettledKeys: report.unsettled.length,
      invariantViolations: report.violations.length,
    };
    log(`summary ${formatStats(report.stats)}`);
    process.stdout.write(JSON.stringify(summary, null, 2) + '\n');
    for (const violation of report.violations.slice(0, 50)) process.stdout.write(`VIOLATION ${violation}\n`);
    for (const key of report.unsettled.slice(0, 50)) process.stdout.write(`UNSETTLED ${key}\n`);
    process.exitCode = report.violations.length === 0 && report.unsettled.length === 0 ? 0 : 1;
  } finally {
    await run.stop();
    await redis?.stop();
    await db?.drop();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`soak failed: ${(error as Error).stack ?? String(error)}\n`);
  process.exit(1);
});
