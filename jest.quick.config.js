// `npm run test:quick`: the inner loop while changing lib/ (under a minute on 2 cores).
// The suites a change to lib/ most often breaks, on the real services they need: the core
// units, the module and handler configuration, every transport's conformance driver and
// the caller/operation shapes (who is asking and what is asked), the store contracts of
// every store (memory, Redis through ioredis and node-redis, TypeORM on PostgreSQL and
// MariaDB, Prisma, Drizzle), steps and the outbox relay. What it leaves to `npm test`: the
// docs apps, crashes, faults, the invariant harnesses, the integrations and the bench.
const base = require('./jest.config.js');

/** @type {import('jest').Config} */
module.exports = {
  ...base,
  roots: ['<rootDir>/test'],
  testMatch: [
    '<rootDir>/test/core/**/*.spec.ts',
    '<rootDir>/test/conformance/**/*.spec.ts',
    '<rootDir>/test/nest/{handler-config,module,service}.spec.ts',
    '<rootDir>/test/nest/{runtime,http}.e2e-spec.ts',
    '<rootDir>/test/redis/{redis.store,node-redis.store}.spec.ts',
    '<rootDir>/test/typeorm/store.postgres.spec.ts',
    '<rootDir>/test/typeorm/mariadb/store.mariadb.spec.ts',
    '<rootDir>/test/prisma/store.spec.ts',
    '<rootDir>/test/drizzle/store.spec.ts',
    '<rootDir>/test/steps/steps.spec.ts',
    '<rootDir>/test/outbox/relay.spec.ts',
  ],
};
