import { describeStoreContract } from '../../lib/testing/index.js';
import { PrismaIdempotencyStore } from '../../lib/prisma/index.js';
import { assumeClaimReturning } from '../../lib/sql/dialects/mysql-server.js';
import { createMariaDatabase, createPgDatabase } from './support.js';

// The shared store contract on the real servers, through Prisma 7's driver adapters.

describeStoreContract('PrismaIdempotencyStore (PostgreSQL, @prisma/adapter-pg)', async () => {
  const db = await createPgDatabase();
  const store = new PrismaIdempotencyStore(db.prisma);
  await store.ensureTable();
  await store.verify();
  return { store, dispose: () => db.destroy() };
});

describeStoreContract('PrismaIdempotencyStore (MariaDB, @prisma/adapter-mariadb)', async () => {
  const db = await createMariaDatabase();
  const store = new PrismaIdempotencyStore(db.prisma);
  await store.ensureTable();
  await store.verify();
  return { store, dispose: () => db.destroy() };
});

// MySQL 8 has no INSERT ... RETURNING, and Prisma reports no insert id: the claim then
// reads its row (two statements). Run those statements on MariaDB, which takes them too.
describeStoreContract('PrismaIdempotencyStore (MySQL 8 statements on MariaDB)', async () => {
  const db = await createMariaDatabase();
  assumeClaimReturning(db.prisma, false);
  const store = new PrismaIdempotencyStore(db.prisma);
  await store.ensureTable();
  return { store, dispose: () => db.destroy() };
});
