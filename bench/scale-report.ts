/** The figures bench/scale.ts collects, and its markdown report (ending with the "Sizing" table). */
import { cpus, totalmem } from 'node:os';
import type { LatencyRun, OpStats, PurgeFigures } from './scale-measure.js';
import type { TableBytes } from './scale-template.js';
import { median, round } from './stats.js';

export interface SizeFigures {
  size: number;
  /** Runs on the empty table (SQL: alternating with the filled one; Redis: the size-0 entries). */
  empty: LatencyRun[];
  filled: LatencyRun[];
  fillMs?: number;
  fillRowsPerSecond?: number;
  settleMs?: number;
  dirtyPagesLeft?: number;
  bytes?: TableBytes;
  encodings?: string[];
  dbSize?: number;
  /** Redis: the empty run after the population was deleted (drift check). */
  afterDelete?: boolean;
}

export interface BodyFigures {
  bodyBytes: number;
  resultChars: number;
  bytes?: TableBytes;
  fillMs?: number;
  encodings?: string[];
}

export interface StoreFigures {
  store: string;
  server: string;
  template?: unknown;
  sizes: SizeFigures[];
  bodies: BodyFigures[];
  purge?: PurgeFigures;
  notes: string[];
}

export interface ScaleReport {
  startedAt: string;
  lib: string;
  config: Record<string, unknown>;
  command: string;
  stores: StoreFigures[];
  durationMs?: number;
}

const OPS = ['claim', 'complete', 'replay'] as const;
const QUANTILES = ['p50', 'p99'] as const;
/** Issue 32: at 10M records, within 1.2× of empty. */
const TARGET = 1.2;
const GIB = 2 ** 30;
const NAMES: Record<string, string> = { postgres: 'PostgreSQL', mariadb: 'MariaDB', redis: 'Redis' };

const byConcurrency = (runs: LatencyRun[], concurrency: number) => runs.filter((run) => run.concurrency === concurrency);
const concurrencies = (entry: SizeFigures) => [...new Set([...entry.empty, ...entry.filled].map((run) => run.concurrency))];
const count = (n: number) => (n >= 1e6 ? `${n / 1e6}M` : n >= 1e3 ? `${n / 1e3}k` : String(n));

function medianOf(runs: LatencyRun[], op: (typeof OPS)[number], q: (typeof QUANTILES)[number]): number {
  return median(runs.map((run) => (run[op] as OpStats)[q]));
}

/** filled ÷ empty for each op and quantile: SQL pairs each round's runs; Redis divides medians by the size-0 medians. */
export function ratiosOf(entry: SizeFigures, concurrency: number, emptyBaseline?: LatencyRun[]): Record<string, number> {
  const filled = byConcurrency(entry.filled, concurrency);
  const empty = byConcurrency(emptyBaseline ?? entry.empty, concurrency);
  const out: Record<string, number> = {};
  for (const op of OPS) {
    for (const q of QUANTILES) {
      out[`${op} ${q}`] = emptyBaseline
        ? round(medianOf(filled, op, q) / medianOf(empty, op, q), 2)
        : round(median(filled.map((run, i) => run[op][q] / empty[i][op][q])), 2);
    }
  }
  return out;
}

function latencyTable(figures: StoreFigures): string[] {
  const lines = [
    '| records | callers | claim p50 | claim p99 | complete p50 | complete p99 | replay p50 | replay p99 |',
    '|--:|--:|--:|--:|--:|--:|--:|--:|',
  ];
  const redis = figures.store === 'redis';
  for (const entry of figures.sizes) {
    for (const c of concurrencies(entry)) {
      const runs = byConcurrency(entry.filled.length ? entry.filled : entry.empty, c);
      const label = entry.afterDelete ? '0 (after delete)' : count(entry.size);
      const cells = OPS.flatMap((op) => QUANTILES.map((q) => String(medianOf(runs, op, q))));
      lines.push(`| ${label} | ${c} | ${cells.join(' | ')} |`);
      if (!redis && entry.size > 0) {
        const empty = byConcurrency(entry.empty, c);
        lines.push(
          `| (empty, same rounds) | ${c} | ${OPS.flatMap((op) => QUANTILES.map((q) => String(medianOf(empty, op, q)))).join(' | ')} |`,
        );
      }
    }
  }
  return lines;
}

function ratioTable(figures: StoreFigures): string[] {
  const lines = [
    `| records | callers | claim p50 | claim p99 | complete p50 | complete p99 | replay p50 | replay p99 | within ${TARGET}× |`,
    '|--:|--:|--:|--:|--:|--:|--:|--:|:-:|',
  ];
  const redis = figures.store === 'redis';
  const baseline = redis ? figures.sizes.find((entry) => entry.size === 0 && !entry.afterDelete) : undefined;
  for (const entry of figures.sizes) {
    if (entry.size === 0 && !(redis && entry.afterDelete)) continue;
    for (const c of concurrencies(entry)) {
      // Redis's drift row: the after-delete runs in the place of filled ones.
      const shown = entry.afterDelete ? { ...entry, filled: entry.empty } : entry;
      const ratios = ratiosOf(shown, c, redis ? baseline?.empty : undefined);
      const worst = Math.max(...Object.values(ratios));
      const label = entry.afterDelete ? '0 again (drift)' : count(entry.size);
      lines.push(`| ${label} | ${c} | ${Object.values(ratios).join(' | ')} | ${worst <= TARGET ? 'yes' : `**no** (${worst})`} |`);
    }
  }
  return lines;
}

function fillTable(figures: StoreFigures): string[] {
  const lines = ['| records | fill s | rows / s | settle s | bytes / record | detail |', '|--:|--:|--:|--:|--:|---|'];
  for (const entry of figures.sizes.filter((e) => e.fillMs !== undefined || e.bytes)) {
    const perRecord = entry.bytes ? Math.round(entry.bytes.total / entry.bytes.rows) : '';
    const detail = entry.bytes ? detailText(entry.bytes, entry.encodings) : '';
    lines.push(
      `| ${count(entry.size)} | ${entry.fillMs === undefined ? '' : round(entry.fillMs / 1000, 1)} | ${entry.fillRowsPerSecond ?? ''} | ` +
        `${entry.settleMs === undefined ? '' : round(entry.settleMs / 1000, 1)}${entry.dirtyPagesLeft ? ` (${entry.dirtyPagesLeft} dirty pages left)` : ''} | ${perRecord} | ${detail} |`,
    );
  }
  return lines;
}

function detailText(bytes: TableBytes, encodings?: string[]): string {
  const parts = Object.entries(bytes.detail).map(([name, value]) =>
    name.endsWith('PerKey') || name.endsWith('Mean') ? `${name} ${Math.round(value)} B` : `${name} ${(value / 2 ** 20).toFixed(1)} MiB`,
  );
  if (encodings?.length) parts.push(`encoding ${encodings.join(', ')}`);
  return `${bytes.rows} rows; ${parts.join(', ')}`;
}

/** The claims measured before, during and after a purge or an expiry, one row per window. */
function windowsTable(windows: Array<[string, PurgeFigures['before']]>): string[] {
  return [
    '| window | s | claims | claims / s | p50 | p99 | max |',
    '|---|--:|--:|--:|--:|--:|--:|',
    ...windows.map(
      ([label, window]) =>
        `| ${label} | ${round(window.ms / 1000, 1)} | ${window.stats.n} | ${window.perSecond} | ${window.stats.p50} | ${window.stats.p99} | ${window.stats.max} |`,
    ),
  ];
}

function purgeSection(purge: PurgeFigures): string[] {
  return [
    `${purge.expired} expired + ${purge.live} live records (filled in ${round(purge.fillMs / 1000, 1)} s). One \`purgeExpired()\` ` +
      `(batches of at most ${purge.batchSize}, \`purgeBatchSize\`) deleted ${purge.deleted} rows in ${round(purge.purgeMs / 1000, 1)} s: ` +
      `**${purge.rowsPerSecond} rows/s**; ${purge.expiredLeft} expired rows left. Claims at concurrency 16, new keys, µs:`,
    '',
    ...windowsTable([
      ['before the purge', purge.before],
      ['during the purge', purge.during],
      ['after the purge', purge.after],
    ]),
    '',
    `Claims' p99 during the purge ÷ the mean of before and after: **${purge.p99Ratio}×** (target ≤ 2×).`,
  ];
}

function sizingTable(report: ScaleReport): string[] {
  const lines = [
    '| store | response body | stored result | bytes / record | records / GiB | expired records removed / s |',
    '|---|--:|--:|--:|--:|--:|',
  ];
  for (const figures of report.stores) {
    const rate = figures.purge ? `${figures.purge.rowsPerSecond} (purgeExpired)` : '';
    for (const body of figures.bodies.filter((b) => b.bytes)) {
      const perRecord = body.bytes!.total / body.bytes!.rows;
      lines.push(
        `| ${NAMES[figures.store] ?? figures.store} | ${body.bodyBytes} B | ${body.resultChars} chars | ${Math.round(perRecord)} | ` +
          `${Math.round(GIB / perRecord).toLocaleString('en-US')} | ${rate} |`,
      );
    }
  }
  return lines;
}

export function renderReport(report: ScaleReport): string {
  const out = [
    '# Store cost as the data grows (bench/scale.ts)',
    '',
    `Run ${report.startedAt}, ${report.lib}; ${cpus().length} CPUs (${cpus()[0]?.model ?? 'unknown'}), ` +
      `${Math.round(totalmem() / GIB)} GiB RAM, shared with other work; took ${round((report.durationMs ?? 0) / 60_000, 1)} min.`,
    '',
    `Latencies are µs per store call (TypeOrmIdempotencyStore on a DataSource with a pool of 20; RedisIdempotencyStore on ioredis), ` +
      `${report.config.ops} calls per case, medians of ${report.config.rounds} rounds. A claim takes a new key, a completion ` +
      'completes it, a replay claims a random pre-filled (live, completed) key. SQL: the filled table and an empty one ' +
      '(truncated before each round) are measured alternately, and each ratio is filled ÷ empty of the same round. Redis ' +
      'has one keyspace, so its ratios divide by the run at size 0 before the fill, and the run after the delete shows the drift.',
    '',
    `Command: \`${report.command}\``,
    '',
  ];
  for (const figures of report.stores) {
    out.push(`## ${NAMES[figures.store] ?? figures.store}`, '', figures.server ? `Server: ${figures.server}.` : '', '');
    for (const note of figures.notes) out.push(`- ${note}`);
    if (figures.notes.length) out.push('');
    if (!figures.sizes.length) continue;
    out.push('### Latency, µs', '', ...latencyTable(figures), '', '### Filled ÷ empty', '', ...ratioTable(figures), '');
    out.push('### Fill and bytes per record (200-byte body)', '', ...fillTable(figures), '');
    const big = figures.bodies.find((body) => body.bodyBytes > 1_000 && body.bytes);
    if (big?.bytes) {
      out.push(
        `10 KB body (${big.bodyBytes} B, stored result ${big.resultChars} characters): ${Math.round(big.bytes.total / big.bytes.rows)} bytes per record ` +
          `(${detailText(big.bytes, big.encodings)}).`,
        '',
      );
    }
    if (figures.purge) out.push('### Purge of expired records while claims run', '', ...purgeSection(figures.purge), '');
  }
  out.push(
    '## Sizing',
    '',
    ...sizingTable(report),
    '',
    'Bytes per record: PostgreSQL `pg_total_relation_size` (heap, TOAST and both indexes) ÷ rows after VACUUM ANALYZE; ' +
      'MariaDB `data_length + index_length` after ANALYZE TABLE (InnoDB estimates from page counts; the .ibd size is in the detail); ' +
      'Redis the mean `MEMORY USAGE ... SAMPLES 0` of 1000 keys (the `used_memory` delta per key is in the detail). ' +
      "Records per GiB leave out the database's own overhead (WAL, undo, free space, replication buffers).",
    '',
    'Reproduce:',
    '',
    '```sh',
    report.command,
    'node -r ./test/support/ts-require.js bench/scale.ts --sizes 0,10000,100000 --big-body-records 10000 --purge-expired 100000 --purge-live 100000   # a quick look',
    '```',
    '',
  );
  return out.join('\n');
}
