import { IdempotencyConfigurationError } from '../../core/errors.js';
import { shown } from '../../core/options.js';
import { DEFAULT_RECORDS_TABLE, parseTableName } from '../../sql/dialects/records-table.js';
import { mapOutboxEntity, type IdempotencyOutboxRow } from './outbox.entity.js';
import { IdempotencyRecordEntity, createIdempotencyRecordEntity } from './record.entity.js';
import { IdempotencyStepEntity, createIdempotencyStepEntity } from './step.entity.js';

/** One of the entity classes of `idempotencyEntities` (records, step records, outbox). */
export type IdempotencyEntityClass = new () => object;

/** Options of `createIdempotencyEntities`. */
export interface IdempotencyEntitiesOptions {
  /**
   * The records table, `'table'` or `'schema.table'`: the same name as the store's
   * `tableName`. The other tables are named after it (`<table>_steps`, `<table>_outbox`).
   * @default 'idempotency_records'
   */
  tableName?: string;
}

function outboxEntityOf(recordsTable: string): new () => IdempotencyOutboxRow {
  const { table } = parseTableName(recordsTable);
  const named = {
    // A distinct, readable class name per table (TypeORM and error messages show it).
    [`IdempotencyOutbox_${table}`]: class implements IdempotencyOutboxRow {
      id!: string;
      key!: string;
      messages!: string;
      count!: number;
      next!: number;
      attempts!: number;
      stagedAt!: number;
      availableAt!: number;
      claimedBy!: string | null;
      claimedUntil!: number;
      sentAt!: number | null;
      lastError!: string | null;
    },
  };
  const entity = named[`IdempotencyOutbox_${table}`];
  mapOutboxEntity(entity, recordsTable);
  return entity;
}

/**
 * Every table the installed version of the store needs, as TypeORM entities: the records
 * table `idempotency_records`, its step records (`_steps`, docs/steps.md) and its outbox
 * (`_outbox`, docs/outbox.md). Spread it into your DataSource's `entities`:
 *
 * ```ts
 * new DataSource({ type: 'postgres', entities: [Account, ...idempotencyEntities], synchronize: true });
 * ```
 *
 * A version that adds a table adds its entity here, so `synchronize` (or
 * `migration:generate`) creates it with no change to your code. The store itself speaks
 * plain SQL and never reads these entities: they exist for TypeORM's schema tools. On
 * MySQL / MariaDB the columns are those of the migration (`MEDIUMTEXT` results,
 * binary-collated keys).
 */
export const idempotencyEntities: readonly IdempotencyEntityClass[] = Object.freeze([
  IdempotencyRecordEntity,
  IdempotencyStepEntity,
  outboxEntityOf(DEFAULT_RECORDS_TABLE),
]);

const byTable = new Map<string, readonly IdempotencyEntityClass[]>([[DEFAULT_RECORDS_TABLE, idempotencyEntities]]);

/**
 * `idempotencyEntities` for a records table with another name (the store's `tableName`,
 * `'table'` or `'schema.table'`). TypeORM binds a table name to a class when it is
 * decorated, so each name gets its own classes; calling it again with the same name
 * returns the same array.
 *
 * @example
 * const billingIdempotency = createIdempotencyEntities({ tableName: 'billing.idempotency_records' });
 * new DataSource({ ..., entities: [Invoice, ...billingIdempotency] });
 * new TypeOrmIdempotencyStore(dataSource, { tableName: 'billing.idempotency_records' });
 */
export function createIdempotencyEntities(options: IdempotencyEntitiesOptions = {}): readonly IdempotencyEntityClass[] {
  const tableName = options.tableName ?? DEFAULT_RECORDS_TABLE;
  if (typeof tableName !== 'string') {
    throw new IdempotencyConfigurationError(
      `createIdempotencyEntities: tableName must be a string, got ${shown(tableName)}.`,
      "Pass the store's tableName, e.g. { tableName: 'billing.idempotency_records' }.",
    );
  }
  parseTableName(tableName); // refuses an invalid name before any class is made
  let entities = byTable.get(tableName);
  if (!entities) {
    entities = Object.freeze([createIdempotencyRecordEntity(tableName), createIdempotencyStepEntity(tableName), outboxEntityOf(tableName)]);
    byTable.set(tableName, entities);
  }
  return entities;
}
