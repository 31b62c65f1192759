/**
 * Removal of expired records while claims run, for bench/scale.ts: the SQL store's own
 * `purgeExpired()` (batches of at most `purgeBatchSize` under its advisory lock) on a table of
 * expired and live records, with claims at concurrency 16 before, during and after it.
 * (Redis has no purge: its own key expiry forgets a record.)
 */
import type { IdempotencyStore } from '../lib/core/index.js';
import { claimsUntil, type ClaimLoop, type OpStats } from './scale-measure.js';
import type { RecordRow, SqlTarget } from './scale-sql.js';
import { round } from './stats.js';

export interface ClaimsWindow {
  stats: OpStats;
  perSecond: number;
  ms: number;
}

export interface PurgeFigures {
  expired: number;
  live: number;
  fillMs: number;
  /** Rows the purge deleted, how long it took, rows per second. */
  deleted: number;
  purgeMs: number;
  rowsPerSecond: number;
  batchSize: number;
  before: ClaimsWindow;
  during: ClaimsWindow;
  after: ClaimsWindow;
  /** Claims' p99 during the purge ÷ the mean of before and after. */
  p99Ratio: number;
  /** Expired rows left once the purge returned (0 expected). */
  expiredLeft: number;
}

const CONCURRENCY = 16;

/** Claims for `ms` milliseconds (at least 500 of them). */
function claimsFor(
  store: IdempotencyStore,
  fingerprint: string | undefined,
  ms: number,
  loop: Partial<ClaimLoop> = {},
): Promise<ClaimsWindow> {
  const end = Date.now() + ms;
  return claimsUntil(store, fingerprint, { concurrency: CONCURRENCY, done: () => Date.now() >= end, minOps: 500, ...loop });
}

function ratioOf(before: ClaimsWindow, during: ClaimsWindow, after: ClaimsWindow): number {
  return round(during.stats.p99 / ((before.stats.p99 + after.stats.p99) / 2), 2);
}

/**
 * `expired` records whose retention ended 1 to 2 hours ago and `live` ones, copies of
 * `template`, in `table` (made by the migration); then claims before, during and after
 * one `purgeExpired()`.
 */
export async function sqlPurge(
  target: SqlTarget,
  table: string,
  template: RecordRow,
  counts: { expired: number; live: number },
  windowMs: number,
  log: (line: string) => void,
): Promise<PurgeFigures> {
  const hour = 3_600_000;
  let fillMs = await target.fill(table, 'plive:', template, 0, counts.live, { latestExpiry: template.expires_at, spreadMs: 12 * hour });
  fillMs += await target.fill(table, 'pexp:', template, 0, counts.expired, { latestExpiry: Date.now() - hour, spreadMs: hour });
  log(`purge table filled (${counts.expired} expired + ${counts.live} live) in ${fillMs} ms`);
  await target.settle(table);
  const store = target.store(table) as IdempotencyStore & {
    purgeExpired(): Promise<{ ran: boolean; deleted: number }>;
    purgeBatchSize: number;
  };
  const fingerprint = template.fingerprint ?? undefined;
  // Claims hold day-long leases, so that none of them expires while the purge runs: with
  // 30 s, then 10 min, a slower purge (MariaDB beside 16 claimers: about 1 300 rows/s) had
  // claims expiring as fast as it deleted them, and never ended.
  const loop = { leaseTtl: 86_400_000 };
  await claimsFor(store, fingerprint, 1_000, loop);
  const before = await claimsFor(store, fingerprint, windowMs, loop);
  let purged: { ran: boolean; deleted: number } | undefined;
  let failure: unknown;
  const startedAt = Date.now();
  const purge = store.purgeExpired().then(
    (result) => (purged = result),
    (error: unknown) => (failure = error),
  );
  const during = await claimsUntil(store, fingerprint, {
    ...loop,
    concurrency: CONCURRENCY,
    done: () => purged !== undefined || failure !== undefined,
    minOps: 500,
  });
  await purge;
  if (failure) throw failure;
  const purgeMs = Date.now() - startedAt;
  if (!purged?.ran) throw new Error('purgeExpired() did not run (another purge held the lock)');
  const after = await claimsFor(store, fingerprint, windowMs, loop);
  const [left] = (await target.dataSource.query(
    `SELECT COUNT(*) AS n FROM ${target.quoted(table)} WHERE ${target.kind === 'mariadb' ? '`expires_at`' : '"expires_at"'} < ${Date.now() - 30 * 60_000}`,
  )) as Array<{ n: unknown }>;
  return {
    ...counts,
    fillMs,
    deleted: purged.deleted,
    purgeMs,
    rowsPerSecond: round((purged.deleted / purgeMs) * 1000, 0),
    batchSize: store.purgeBatchSize,
    before,
    during,
    after,
    p99Ratio: ratioOf(before, during, after),
    expiredLeft: Number(left.n),
  };
}
