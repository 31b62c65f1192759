import { Column, Entity, Index, PrimaryColumn } from 'typeorm';
import { MysqlDriver } from 'typeorm/driver/mysql/MysqlDriver.js';
import { mapColumnOnMysql } from '../column-types.js';
import { parseTableName } from '../../sql/dialects/records-table.js';
import { outboxTableOf } from '../../sql/outbox-table.js';

/** One row of an outbox table (docs/outbox.md): the messages one execution staged. */
export interface IdempotencyOutboxRow {
  id: string;
  key: string;
  messages: string;
  count: number;
  next: number;
  attempts: number;
  stagedAt: number;
  availableAt: number;
  claimedBy: string | null;
  claimedUntil: number;
  sentAt: number | null;
  lastError: string | null;
}

const epochMs = {
  to: (value: unknown) => value,
  from: (value: unknown) => (value === null || value === undefined ? value : Number(value)),
};

/** The outbox entities made here, whose indexes are those of the MySQL DDL on that family. */
const outboxEntities = new WeakSet<Function>();

/**
 * Maps `<records table>_outbox` as `ensureTable()` and the migration create it
 * (sql/outbox-table.ts): the same columns, primary key and index names, so that TypeORM's
 * `synchronize` makes a table the store's statements run on and finds nothing to change
 * in a table the migration made. The indexes are PostgreSQL's (two partial indexes); on
 * MySQL / MariaDB, where an index has no WHERE, the DDL has one index on
 * (`sent_at`, `available_at`) instead, which `useMysqlOutboxIndexes` puts in their place.
 */
export function mapOutboxEntity(target: new () => IdempotencyOutboxRow, recordsTable: string): void {
  const outbox = outboxTableOf(parseTableName(recordsTable));
  const proto = target.prototype as object;
  PrimaryColumn({ name: 'id', type: 'varchar', length: 64, primaryKeyConstraintName: `pk_${outbox.table}` })(proto, 'id');
  Column({ name: 'key', type: 'varchar', length: 255 })(proto, 'key');
  Column({ name: 'messages', type: 'text' })(proto, 'messages');
  Column({ name: 'count', type: 'integer' })(proto, 'count');
  Column({ name: 'next', type: 'integer', default: 0 })(proto, 'next');
  Column({ name: 'attempts', type: 'integer', default: 0 })(proto, 'attempts');
  Column({ name: 'staged_at', type: 'bigint', transformer: epochMs })(proto, 'stagedAt');
  Column({ name: 'available_at', type: 'bigint', transformer: epochMs })(proto, 'availableAt');
  Column({ name: 'claimed_by', type: 'varchar', length: 64, nullable: true })(proto, 'claimedBy');
  Column({ name: 'claimed_until', type: 'bigint', default: 0, transformer: epochMs })(proto, 'claimedUntil');
  Column({ name: 'sent_at', type: 'bigint', nullable: true, transformer: epochMs })(proto, 'sentAt');
  Column({ name: 'last_error', type: 'text', nullable: true })(proto, 'lastError');
  Index(`idx_${outbox.table}_due`, ['availableAt'], { where: '"sent_at" IS NULL' })(target);
  Index(`idx_${outbox.table}_sent_at`, ['sentAt'], { where: '"sent_at" IS NOT NULL' })(target);
  Entity({ name: outbox.table, ...(outbox.schema ? { schema: outbox.schema } : {}) })(target);
  // MySQL / MariaDB: the DDL's LONGTEXT and binary collation (the table's utf8mb4_bin).
  mapColumnOnMysql(target, 'messages', { type: 'longtext', collation: 'binary' });
  for (const property of ['id', 'key', 'claimedBy', 'lastError']) mapColumnOnMysql(target, property, { collation: 'binary' });
  outboxEntities.add(target);
  useMysqlOutboxIndexes();
}

/** The parts of TypeORM's metadata read and changed here (the same on TypeORM 0.3 and 1.x). */
interface IndexLike {
  name: string;
  where?: string;
  columns: ColumnLike[];
  columnNamesWithOrderingMap: Record<string, number>;
}
interface ColumnLike {
  target?: unknown;
  propertyName?: string;
  databaseName?: string;
  entityMetadata?: { columns: ColumnLike[]; indices: IndexLike[]; ownIndices?: IndexLike[] };
}

let installed = false;

/**
 * On the MySQL family, the outbox entity's indexes become the DDL's: `idx_<outbox>_due` on
 * (`sent_at`, `available_at`), and no `idx_<outbox>_sent_at`. TypeORM builds the metadata
 * of each DataSource from the decorators (which cannot know the database), then validates
 * every column through the driver's `normalizeType` before any DDL or schema diff: the
 * MySQL driver's method is wrapped (once, over the column types' own wrapper) to change that
 * DataSource's copy of the outbox entity's index metadata the first time it sees one of its
 * columns. Every other entity and driver is left as TypeORM made it.
 */
function useMysqlOutboxIndexes(): void {
  if (installed) return;
  installed = true;
  const prototype = (MysqlDriver as unknown as { prototype: { normalizeType(column: ColumnLike): string } } | undefined)?.prototype;
  if (!prototype || typeof prototype.normalizeType !== 'function') return;
  const original = prototype.normalizeType;
  const adjusted = new WeakSet<object>();
  prototype.normalizeType = function normalizeType(this: unknown, column: ColumnLike) {
    const metadata = column?.entityMetadata;
    if (metadata && typeof column.target === 'function' && outboxEntities.has(column.target) && !adjusted.has(metadata)) {
      adjusted.add(metadata);
      const byProperty = (name: string) => metadata.columns.find((c) => c.propertyName === name);
      const sentAt = byProperty('sentAt');
      const availableAt = byProperty('availableAt');
      const due = metadata.indices.find((index) => index.name.endsWith('_due'));
      if (sentAt?.databaseName && availableAt?.databaseName && due) {
        due.where = undefined;
        due.columns = [sentAt, availableAt];
        due.columnNamesWithOrderingMap = { [sentAt.databaseName]: 1, [availableAt.databaseName]: 1 };
        const keep = (index: IndexLike) => !index.name.endsWith('_sent_at');
        metadata.indices = metadata.indices.filter(keep);
        if (metadata.ownIndices) metadata.ownIndices = metadata.ownIndices.filter(keep);
      }
    }
    return original.call(this, column);
  };
}
