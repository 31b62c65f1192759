import type { TableFixes } from '../sql/failures.js';

/** How a Prisma user creates the records table, or replaces a foreign one (the hints of a configuration error). */
export const PRISMA_TABLE_FIXES: TableFixes = {
  missingTable: (name) =>
    `Create it before the application serves requests: add the IdempotencyRecord and IdempotencyStep models to schema.prisma ` +
    `and run your migration, apply the SQL of prismaIdempotencyMigrationSql('postgresql' | 'mysql', '${name}') ` +
    `(docs/prisma.md, "The tables"), or call store.ensureTable() at startup.`,
  missingColumn:
    `It was not created by this library: drop or rename it and create it from docs/prisma.md ("The tables") or with store.ensureTable(), ` +
    `or point the store's tableName option at another table.`,
};

/** How a Prisma user creates the steps table. */
export const PRISMA_STEPS_FIX =
  'Create it: add the IdempotencyStep model (docs/prisma.md, "The tables") and run your migration, or call store.ensureTable().';
