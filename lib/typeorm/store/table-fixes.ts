import type { TableFixes } from '../../sql/failures.js';

/** How a TypeORM user creates the records table, or replaces a foreign one (the hints of a configuration error). */
export const TYPEORM_TABLE_FIXES: TableFixes = {
  missingTable: (name) =>
    `Create it before the application serves requests: run the CreateIdempotencyRecords1700000000000 migration ` +
    `(createIdempotencyRecordsMigration('${name}') for this name), call store.ensureTable() at startup, ` +
    `or register IdempotencyRecordEntity (createIdempotencyRecordEntity('${name}')) in the DataSource's entities with synchronize.`,
  missingColumn:
    `It was not created by this library: drop or rename it and create it with the CreateIdempotencyRecords1700000000000 migration, ` +
    `store.ensureTable() or IdempotencyRecordEntity, or point the store's tableName option at another table.`,
};

/** How a TypeORM user creates the steps table beside a 0.4 / 0.5 records table. */
export const TYPEORM_STEPS_FIX =
  'Create it: run the AddIdempotencySteps1720000000000 migration (docs/steps.md, "Upgrading a 0.4 or 0.5 table"), or call store.ensureTable().';
