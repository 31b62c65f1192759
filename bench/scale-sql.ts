/**
 * PostgreSQL and MariaDB for bench/scale.ts: the records table made by the library's own
 * migration, populations copied server-side from one record the store wrote (no row
 * crosses from Node), the table's size on disk, and the purge of expired records.
 */
import 'reflect-metadata';
import { statfsSync } from 'node:fs';
import type { DataSource } from 'typeorm';
import { loadLibModule } from './lib.js';
import { measurePurge, populationKey, type PurgeFigures, type PurgingStore } from './scale-measure.js';
import { recordThroughHttp, type ScaleTarget, type TableBytes, type Template } from './scale-template.js';
import { migrateRecordsTable, openDataSource } from './sql-stores.js';

export type SqlKind = 'postgres' | 'mariadb';

/** A row of the records table, as the store wrote it. */
export interface RecordRow {
  status: string;
  lease_token: string | null;
  lease_expires_at: number | null;
  fingerprint: string | null;
  result: string | null;
  expires_at: number;
  created_at: number;
}

/** How the rows of a population expire: spread over `spreadMs`, the latest at `latestExpiry` (epoch ms). */
export interface Expiry {
  latestExpiry: number;
  spreadMs: number;
}

const COLUMNS = ['key', 'status', 'lease_token', 'lease_expires_at', 'fingerprint', 'result', 'expires_at', 'created_at'];

const HOUR = 3_600_000;

export class SqlTarget implements ScaleTarget<RecordRow> {
  private constructor(
    readonly kind: SqlKind,
    readonly dataSource: DataSource,
  ) {}

  static async open(kind: SqlKind, url: string): Promise<SqlTarget> {
    // A pool larger than the 16 concurrent callers, as an application would size it.
    return new SqlTarget(kind, await openDataSource(kind, url));
  }

  /** A table or column name, quoted for the server. */
  private quoted(name: string): string {
    return this.kind === 'mariadb' ? `\`${name}\`` : `"${name}"`;
  }

  /** `WHERE key = <the first parameter>`. */
  private byKey(): string {
    return `WHERE ${this.quoted('key')} = ${this.kind === 'mariadb' ? '?' : '$1'}`;
  }

  /** Creates the records table (and its steps table) through the library's migration, as an application does. */
  async create(table: string): Promise<void> {
    await this.drop(table);
    await migrateRecordsTable(this.dataSource, table, 'up');
  }

  /** Drops what the migration created (its `down`). */
  async drop(table: string): Promise<void> {
    await migrateRecordsTable(this.dataSource, table, 'down');
  }

  store(table: string): PurgingStore {
    const { TypeOrmIdempotencyStore } = loadLibModule<typeof import('../lib/typeorm/index.js')>('typeorm/index.ts');
    return new TypeOrmIdempotencyStore(this.dataSource, { tableName: table }) as unknown as PurgingStore;
  }

  /**
   * One record written through HTTP into `table`, read back as the fill copies it. The
   * SQL and Node derivations of a population key must agree, or replays would miss: a
   * copy under `populationKey('check:', 0)` is read back by that key, then deleted.
   */
  async template(table: string, bodyBytes: number): Promise<Template<RecordRow>> {
    const written = await recordThroughHttp(this.store(table), bodyBytes);
    const record = await this.readRow(table, written.key);
    await this.fill(table, 'check:', record, 0, 1, { latestExpiry: record.expires_at, spreadMs: HOUR });
    await this.readRow(table, populationKey('check:', 0));
    await this.dataSource.query(`DELETE FROM ${this.quoted(table)} ${this.byKey()}`, [populationKey('check:', 0)]);
    return {
      written,
      record,
      fingerprint: record.fingerprint ?? undefined,
      result: record.result!,
      shown: { ...written, row: { ...record, result: `${record.result?.length} characters` } },
    };
  }

  async readRow(table: string, key: string): Promise<RecordRow> {
    const [row] = (await this.dataSource.query(
      `SELECT ${COLUMNS.slice(1)
        .map((c) => this.quoted(c))
        .join(', ')} FROM ${this.quoted(table)} ${this.byKey()}`,
      [key],
    )) as Array<Record<string, unknown>>;
    if (!row) throw new Error(`no row ${key} in ${table}`);
    const num = (value: unknown) => (value === null ? null : Number(value));
    return {
      status: String(row.status),
      lease_token: row.lease_token === null ? null : String(row.lease_token),
      lease_expires_at: num(row.lease_expires_at),
      fingerprint: row.fingerprint === null ? null : String(row.fingerprint),
      result: row.result === null ? null : String(row.result),
      expires_at: Number(row.expires_at),
      created_at: Number(row.created_at),
    };
  }

  async truncate(table: string): Promise<void> {
    await this.dataSource.query(`TRUNCATE TABLE ${this.quoted(table)}`);
  }

  async count(table: string): Promise<number> {
    const [row] = (await this.dataSource.query(`SELECT COUNT(*) AS n FROM ${this.quoted(table)}`)) as Array<{ n: unknown }>;
    return Number(row.n);
  }

  /**
   * Rows `from` .. `to - 1` of `population`: copies of `template` (the record the store
   * wrote) under the keys `populationKey(population, i)`, in INSERT ... SELECT batches
   * generated server-side (generate_series; MariaDB's Sequence engine, seq_A_to_B). The
   * keys are hashes, so rows land at random places of the primary key, as under real
   * traffic. PostgreSQL sorts each batch by key (fewer buffer evictions while the index
   * grows); MariaDB 10.11 does not: with ORDER BY and a bound parameter its
   * INSERT ... SELECT from a seq_ table inserted one row instead of the batch. The expiry
   * is spread so that the expiry index holds distinct values, as it does under real traffic.
   */
  async fill(
    table: string,
    population: string,
    template: RecordRow,
    from: number,
    to: number,
    expiry: Expiry = { latestExpiry: template.expires_at, spreadMs: 12 * HOUR },
  ): Promise<number> {
    const startedAt = Date.now();
    const lifetime = template.expires_at - template.created_at;
    const rowBytes = 200 + (template.result?.length ?? 0);
    // About 64 MB of rows per statement: few round trips, no statement that holds the table for long.
    const batch = Math.max(1_000, Math.min(500_000, Math.floor(64_000_000 / rowBytes)));
    for (let start = from; start < to; start += batch) {
      const end = Math.min(to, start + batch);
      await this.insertBatch(table, population, template, start, end, expiry, lifetime);
    }
    return Date.now() - startedAt;
  }

  private async insertBatch(
    table: string,
    population: string,
    t: RecordRow,
    start: number,
    end: number,
    expiry: Expiry,
    lifetime: number,
  ): Promise<void> {
    const columns = COLUMNS.map((c) => this.quoted(c)).join(', ');
    if (this.kind === 'postgres') {
      // $7: the latest expiry, $8: the spread, $9: the record's lifetime (expires_at - created_at).
      const expires = `($7::bigint - $8::bigint + (i * 4) % $8::bigint)`;
      await this.dataSource.query(
        `INSERT INTO ${this.quoted(table)} (${columns})
SELECT rtrim(translate(encode(sha256(convert_to($1 || i::text, 'UTF8')), 'base64'), '+/', '-_'), '='),
  $2::varchar, $3::varchar, $4::bigint, $5::varchar, $6::text, ${expires}, ${expires} - $9::bigint
FROM generate_series(${start}::bigint, ${end - 1}::bigint) AS i
ORDER BY 1`,
        [population, t.status, t.lease_token, t.lease_expires_at, t.fingerprint, t.result, expiry.latestExpiry, expiry.spreadMs, lifetime],
      );
      return;
    }
    // Positional parameters in MariaDB are used once each, in order: the expiry's are repeated.
    const e = `(? - ? + (seq * 4) % ?)`;
    const spread = [expiry.latestExpiry, expiry.spreadMs, expiry.spreadMs];
    await this.dataSource.query(
      `INSERT INTO ${this.quoted(table)} (${columns})
SELECT REPLACE(REPLACE(TRIM(TRAILING '=' FROM TO_BASE64(UNHEX(SHA2(CONCAT(?, seq), 256)))), '+', '-'), '/', '_'),
  ?, ?, ?, ?, ?, ${e}, ${e} - ?
FROM seq_${start}_to_${end - 1}`,
      [population, t.status, t.lease_token, t.lease_expires_at, t.fingerprint, t.result, ...spread, ...spread, lifetime],
    );
  }

  /**
   * After a bulk fill, the state a table of that size has in production before it is
   * measured: statistics up to date, and no writes of the fill still pending (PostgreSQL:
   * VACUUM ANALYZE, so autovacuum's insert threshold does not start one mid-measurement,
   * then CHECKPOINT; MariaDB: ANALYZE TABLE, `FLUSH TABLES ... FOR EXPORT`, which
   * returns once the table's dirty pages are on disk (left alone, InnoDB's page cleaner
   * was seen still flushing a 10 M fill after 110 s, during the measurement), then a wait
   * until the server's other dirty pages are flushed too, at most `waitMs`). Returns how
   * long it took and what was left dirty.
   */
  async settle(table: string, waitMs = 180_000): Promise<{ ms: number; dirtyPagesLeft?: number }> {
    const startedAt = Date.now();
    if (this.kind === 'postgres') {
      await this.dataSource.query(`VACUUM (ANALYZE) ${this.quoted(table)}`);
      await this.dataSource.query('CHECKPOINT');
      return { ms: Date.now() - startedAt };
    }
    await this.dataSource.query(`ANALYZE TABLE ${this.quoted(table)}`);
    // FOR EXPORT holds a read lock of its session until UNLOCK TABLES: one connection.
    const session = this.dataSource.createQueryRunner();
    try {
      await session.query(`FLUSH TABLES ${this.quoted(table)} FOR EXPORT`);
      await session.query('UNLOCK TABLES');
    } finally {
      await session.release();
    }
    const deadline = Date.now() + waitMs;
    // Until almost nothing is dirty, or the count stops falling for 5 s (a shared server
    // keeps a floor of dirty pages of its own), or the deadline.
    let dirty = await this.dirtyPages();
    let lowest = dirty;
    let lowestAt = Date.now();
    while (dirty > 200 && Date.now() < deadline && Date.now() - lowestAt < 5_000) {
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      dirty = await this.dirtyPages();
      if (dirty < lowest * 0.98) [lowest, lowestAt] = [dirty, Date.now()];
    }
    return { ms: Date.now() - startedAt, dirtyPagesLeft: dirty };
  }

  private async dirtyPages(): Promise<number> {
    const rows = (await this.dataSource.query(`SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'`)) as Array<{ Value: string }>;
    return Number(rows[0]?.Value ?? 0);
  }

  /**
   * Bytes the table takes. PostgreSQL: pg_total_relation_size (heap + TOAST + indexes),
   * after VACUUM ANALYZE. MariaDB: data_length + index_length of information_schema
   * after ANALYZE TABLE; InnoDB derives them from page counts of its persistent
   * statistics (estimates, in whole 16 KB pages), so the .ibd file's size is given too.
   */
  async bytes(table: string): Promise<{ bytes: TableBytes }> {
    const rows = await this.count(table);
    if (this.kind === 'postgres') {
      await this.dataSource.query(`VACUUM (ANALYZE) ${this.quoted(table)}`);
      const [r] = (await this.dataSource.query(
        `SELECT pg_total_relation_size(c.oid) AS total, pg_relation_size(c.oid) AS heap, pg_indexes_size(c.oid) AS indexes,
  COALESCE(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0) AS toast
FROM pg_class c WHERE c.oid = $1::regclass`,
        [this.quoted(table)],
      )) as Array<Record<string, string>>;
      const detail = { heap: Number(r.heap), toast: Number(r.toast), indexes: Number(r.indexes) };
      return { bytes: { rows, total: Number(r.total), detail } };
    }
    await this.dataSource.query(`ANALYZE TABLE ${this.quoted(table)}`);
    const [r] = (await this.dataSource.query(
      `SELECT data_length, index_length, data_free FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?`,
      [table],
    )) as Array<Record<string, string>>;
    const [file] = (await this.dataSource.query(
      `SELECT file_size, allocated_size FROM information_schema.innodb_sys_tablespaces WHERE name = CONCAT(DATABASE(), '/', ?)`,
      [table],
    )) as Array<Record<string, string>>;
    const detail = {
      data_length: Number(r.data_length),
      index_length: Number(r.index_length),
      data_free: Number(r.data_free),
      ibd_file_size: Number(file?.file_size ?? 0),
    };
    return { bytes: { rows, total: detail.data_length + detail.index_length, detail } };
  }

  /** Free bytes on the file system of the database's data directory (the same machine). */
  async freeBytes(): Promise<number> {
    const rows = (await this.dataSource.query(this.kind === 'postgres' ? 'SHOW data_directory' : 'SELECT @@datadir AS d')) as Array<
      Record<string, string>
    >;
    const dir = Object.values(rows[0])[0];
    for (const path of [dir, '/']) {
      try {
        const s = statfsSync(path);
        return s.bavail * s.bsize;
      } catch {
        // Not readable by this user: the root file system (the data directory's, on this machine).
      }
    }
    return Number.POSITIVE_INFINITY;
  }

  /** The server's version and the settings that decide how much of the table stays in memory. */
  async describe(): Promise<string> {
    if (this.kind === 'postgres') {
      const [r] = (await this.dataSource.query(
        `SELECT version() AS v, current_setting('shared_buffers') AS sb, current_setting('synchronous_commit') AS sc`,
      )) as Array<Record<string, string>>;
      return `${r.v.split(' on ')[0]}, shared_buffers ${r.sb}, synchronous_commit ${r.sc}`;
    }
    const [r] = (await this.dataSource.query(
      `SELECT VERSION() AS v, @@innodb_buffer_pool_size AS bp, @@innodb_flush_log_at_trx_commit AS f, @@innodb_flush_method AS m`,
    )) as Array<Record<string, string>>;
    return `MariaDB ${r.v}, innodb_buffer_pool_size ${Math.round(Number(r.bp) / 2 ** 20)} MB, innodb_flush_log_at_trx_commit ${r.f}, innodb_flush_method ${r.m}`;
  }

  /**
   * `expired` records whose retention ended 1 to 2 hours ago and `live` ones, copies of
   * `template`, in `table`; then claims before, during and after one `purgeExpired()`.
   */
  async purge(
    table: string,
    template: RecordRow,
    counts: { expired: number; live: number },
    windowMs: number,
    log: (line: string) => void,
  ): Promise<PurgeFigures> {
    await this.create(table);
    let fillMs = await this.fill(table, 'plive:', template, 0, counts.live);
    fillMs += await this.fill(table, 'pexp:', template, 0, counts.expired, { latestExpiry: Date.now() - HOUR, spreadMs: HOUR });
    log(`purge table filled (${counts.expired} expired + ${counts.live} live) in ${fillMs} ms`);
    await this.settle(table);
    const expiredLeft = async () => {
      const [left] = (await this.dataSource.query(
        `SELECT COUNT(*) AS n FROM ${this.quoted(table)} WHERE ${this.quoted('expires_at')} < ${Date.now() - 30 * 60_000}`,
      )) as Array<{ n: unknown }>;
      return Number(left.n);
    };
    const figures = await measurePurge(this.store(table), template.fingerprint ?? undefined, windowMs, expiredLeft);
    return { ...counts, fillMs, ...figures };
  }

  async close(): Promise<void> {
    await this.dataSource.destroy();
  }
}
