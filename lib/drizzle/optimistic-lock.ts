import { and, eq, getTableColumns, getTableName, is, sql, type Column, type SQL, type Table } from 'drizzle-orm';
import { getTableConfig as getMysqlTableConfig, MySqlTable } from 'drizzle-orm/mysql-core';
import { getTableConfig as getPgTableConfig, PgTable } from 'drizzle-orm/pg-core';
import { IdempotencyConfigurationError } from '../core/errors.js';
import { OptimisticLockError } from '../typeorm/patterns/errors.js';
import { isDrizzleTransaction } from './drizzle-internals.js';

/**
 * A primary key value (single-column key), or an object of primary key properties
 * (composite key), e.g. `42` or `{ tenantId: 't1', id: 42 }`.
 */
export type DrizzleRowId = string | number | bigint | Date | Record<string, unknown>;

/** Options of `updateWithVersion`. */
export interface UpdateWithVersionOptions<TTable extends Table> {
  /**
   * The property of the table's version column (an integer the update increments).
   * @default 'version'
   */
  version?: keyof TTable['_']['columns'] & string;
}

/** What `updateWithVersion` needs of a database or transaction: Drizzle's `update` and `select` builders. */
interface Updating {
  update(table: Table): { set(values: Record<string, unknown>): { where(where: SQL | undefined): PromiseLike<unknown> } };
  select(fields: Record<string, Column>): {
    from(table: Table): {
      where(where: SQL | undefined): PromiseLike<Array<Record<string, unknown>>> & { for(strength: 'update'): unknown };
    };
  };
}

/**
 * Updates one row only if it is still at `expectedVersion`, in ONE conditional statement:
 * `UPDATE ... SET <changes>, version = version + 1 WHERE <primary key> AND version = :expectedVersion`.
 * Returns the new version. Throws `OptimisticLockError` (HTTP 409) when no row matched
 * (another writer got there first, or the row is gone): reload and retry, or use
 * `retryOnOptimisticLock`. PostgreSQL (node-postgres) and MySQL / MariaDB (mysql2).
 *
 * `changes` uses the table's property names; a value may be a Drizzle `sql` expression.
 * The version in `changes`, if any, is ignored.
 *
 * @example
 * const [account] = await tx.select().from(accounts).where(eq(accounts.id, id));
 * await updateWithVersion(tx, accounts, id, account.version, { balance: account.balance - 10 });
 */
export async function updateWithVersion<TTable extends Table>(
  db: object,
  table: TTable,
  id: DrizzleRowId,
  expectedVersion: number,
  changes: Partial<{ [K in keyof TTable['_']['columns']]: unknown }>,
  options: UpdateWithVersionOptions<TTable> = {},
): Promise<number> {
  if (!Number.isInteger(expectedVersion)) {
    throw new IdempotencyConfigurationError(
      `updateWithVersion: expectedVersion must be an integer, got ${String(expectedVersion)}.`,
      'Pass the version property of the row you read.',
    );
  }
  const columns = getTableColumns(table) as Record<string, Column>;
  const name = getTableName(table);
  const versionProperty = options.version ?? 'version';
  const version = columns[versionProperty];
  if (!version) {
    throw new IdempotencyConfigurationError(
      `The table ${name} has no '${versionProperty}' column, so its updates cannot be checked.`,
      "Add version: integer('version').notNull().default(1) to the table, or pass { version: '<property>' } naming its version column.",
    );
  }
  const where = primaryWhere(table, name, columns, id);
  const set: Record<string, unknown> = { ...changes, [versionProperty]: sql`${version} + 1` };
  const updating = db as Updating;
  const result = await updating
    .update(table)
    .set(set)
    .where(and(where, eq(version, expectedVersion)));
  if (affectedRowsOf(result) > 0) return expectedVersion + 1;
  throw new OptimisticLockError(name, id, expectedVersion, await currentVersion(updating, table, where, version));
}

/** node-postgres answers a QueryResult (`rowCount`), mysql2 `[ResultSetHeader, fields]` (`affectedRows`: rows found). */
function affectedRowsOf(result: unknown): number {
  const pg = result as { rowCount?: unknown } | null;
  if (typeof pg?.rowCount === 'number') return pg.rowCount;
  const header = (Array.isArray(result) ? result[0] : result) as { affectedRows?: unknown } | null;
  if (typeof header?.affectedRows === 'number') return header.affectedRows;
  throw new IdempotencyConfigurationError(
    'updateWithVersion could not read how many rows the update changed.',
    'Use drizzle-orm on node-postgres or mysql2.',
  );
}

/**
 * The row's version now, or `undefined` when the row is gone. Inside a MySQL / MariaDB
 * transaction a plain SELECT answers from its REPEATABLE READ snapshot, which can predate
 * the commit that made the update miss; a locking read sees the latest commit (MariaDB
 * has no FOR SHARE, so FOR UPDATE).
 */
async function currentVersion(db: Updating, table: Table, where: SQL | undefined, version: Column): Promise<number | undefined> {
  const query = db.select({ version }).from(table).where(where);
  const locking = is(table, MySqlTable) && isDrizzleTransaction(db);
  const rows = (await (locking ? query.for('update') : query)) as Array<{ version: unknown }>;
  return rows.length === 0 ? undefined : Number(rows[0].version);
}

/** The condition selecting one row by its primary key (a column's `.primaryKey()` or the table's `primaryKey()`). */
function primaryWhere(table: Table, name: string, columns: Record<string, Column>, id: DrizzleRowId): SQL | undefined {
  const primaries = primaryColumnsOf(table, columns);
  if (primaries.length === 0) {
    throw new IdempotencyConfigurationError(
      `The table ${name} has no primary key.`,
      'Declare one: .primaryKey() on its id column, or primaryKey({ columns }).',
    );
  }
  const isKeyObject = id !== null && typeof id === 'object' && !(id instanceof Date) && !Buffer.isBuffer(id);
  if (!isKeyObject) {
    if (primaries.length > 1) {
      throw new IdempotencyConfigurationError(
        `The table ${name} has a composite primary key; a single value cannot identify a row.`,
        `Pass an object with ${primaries.map(([property]) => property).join(', ')}.`,
      );
    }
    return eq(primaries[0][1], id);
  }
  return and(
    ...primaries.map(([property, column]) => {
      const value = (id as Record<string, unknown>)[property];
      if (value === undefined) {
        throw new IdempotencyConfigurationError(
          `The id of a ${name} row lacks '${property}'.`,
          `Pass every primary key property: ${primaries.map(([each]) => each).join(', ')}.`,
        );
      }
      return eq(column, value);
    }),
  );
}

function primaryColumnsOf(table: Table, columns: Record<string, Column>): Array<[string, Column]> {
  const entries = Object.entries(columns);
  const own = entries.filter(([, column]) => column.primary);
  if (own.length > 0) return own;
  const config = is(table, PgTable) ? getPgTableConfig(table) : is(table, MySqlTable) ? getMysqlTableConfig(table) : undefined;
  const declared = config?.primaryKeys[0]?.columns ?? [];
  return entries.filter(([, column]) => declared.some((primary) => primary.name === column.name));
}

export { retryOnOptimisticLock, isOptimisticLockConflict, type RetryOnOptimisticLockOptions } from '../typeorm/patterns/optimistic-lock.js';
export { OptimisticLockError };
