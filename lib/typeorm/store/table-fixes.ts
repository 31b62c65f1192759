import type { TableFixes } from '../../sql/failures.js';

/** How a TypeORM user creates the records table, or replaces a foreign one (the hints of a configuration error). */
export const TYPEORM_TABLE_FIXES: TableFixes = {
  missingTable: (name) =>
    `Create it before the application serves requests: run the CreateIdempotencyTables1700000000000 migration ` +
    `(createIdempotencyTablesMigration({ tableName: '${name}' }) for this name), call store.ensureTable() at startup, ` +
    `or spread idempotencyEntities (createIdempotencyEntities({ tableName: '${name}' })) into the DataSource's entities with synchronize.`,
  missingColumn:
    `It was not created by this library: drop or rename it and create it with the CreateIdempotencyTables1700000000000 migration, ` +
    `store.ensureTable() or idempotencyEntities, or point the store's tableName option at another table.`,
};

/** How a TypeORM user creates the steps table beside a 0.4 / 0.5 records table. */
export const TYPEORM_STEPS_FIX =
  "Create it: add createIdempotencyTablesMigration({ timestamp }) with the day's timestamp to your migrations (it creates every missing table; docs/migrating.md), " +
  'spread idempotencyEntities into the entities of a DataSource that synchronizes, or call store.ensureTable().';
