import { Column, Entity, Index, PrimaryColumn } from 'typeorm';
import { mapColumnOnMysql } from '../column-types.js';
import { DEFAULT_RECORDS_TABLE, parseTableName } from '../../sql/dialects/records-table.js';
import { stepsTableOf } from '../../sql/dialects/steps-table.js';

/** One row of a step records table (docs/steps.md): a finished step of an execution. */
export interface IdempotencyStepRow {
  key: string;
  step: string;
  result: string;
  expiresAt: number;
}

const epochMs = { to: (value: number) => value, from: (value: string | number) => Number(value) };

/** Applies the column, index and table decorators of the steps table beside `recordsTable`. */
function mapStepEntity(target: new () => IdempotencyStepRow, recordsTable: string): void {
  const steps = stepsTableOf(parseTableName(recordsTable));
  const proto = target.prototype as object;
  PrimaryColumn({ name: 'key', type: 'varchar', length: 255, primaryKeyConstraintName: `pk_${steps.table}` })(proto, 'key');
  PrimaryColumn({ name: 'step', type: 'varchar', length: 64, primaryKeyConstraintName: `pk_${steps.table}` })(proto, 'step');
  Column({ name: 'result', type: 'text' })(proto, 'result');
  Column({ name: 'expires_at', type: 'bigint', transformer: epochMs })(proto, 'expiresAt');
  Index(`idx_${steps.table}_expires_at`, ['expiresAt'])(target);
  Entity({ name: steps.table, ...(steps.schema ? { schema: steps.schema } : {}) })(target);
  // MySQL / MariaDB: what the migration makes there (MEDIUMTEXT, binary-collated keys).
  mapColumnOnMysql(target, 'result', { type: 'mediumtext', collation: 'binary' });
  for (const property of ['key', 'step']) mapColumnOnMysql(target, property, { collation: 'binary' });
}

/**
 * The TypeORM entity of the default step records table, `idempotency_records_steps`: register
 * it beside `IdempotencyRecordEntity` when you let TypeORM synchronize (the store's
 * `verify()` refuses at boot a schema without it).
 *
 * @deprecated register `...idempotencyEntities` instead (the records, steps and outbox tables,
 * and any table a later version adds).
 */
export class IdempotencyStepEntity implements IdempotencyStepRow {
  key!: string;
  step!: string;
  result!: string;
  expiresAt!: number;
}
mapStepEntity(IdempotencyStepEntity, DEFAULT_RECORDS_TABLE);

/**
 * The step records entity beside a records table with another name (`'table'` or `'schema.table'`).
 * @deprecated use `createIdempotencyEntities({ tableName })`, which holds it with the other tables of that name.
 */
export function createIdempotencyStepEntity(recordsTable: string): new () => IdempotencyStepRow {
  const { table } = parseTableName(recordsTable);
  const named = {
    [`IdempotencyStep_${table}`]: class implements IdempotencyStepRow {
      key!: string;
      step!: string;
      result!: string;
      expiresAt!: number;
    },
  };
  const entity = named[`IdempotencyStep_${table}`];
  mapStepEntity(entity, recordsTable);
  return entity;
}
