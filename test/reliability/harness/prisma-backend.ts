/**
 * The Prisma backend of the harness app: a generated Prisma 7 client on @prisma/adapter-pg
 * (the run's schema through search_path, its application_name for pg_terminate_backend),
 * or on @prisma/adapter-mariadb with `HARNESS_DB=mariadb` (the run's database). The client
 * is generated once by the spec (test/prisma/support.ts, offline) and its `client.ts` is
 * passed as `HARNESS_PRISMA_CLIENT`: a child process must not generate (two at once would
 * race, and it costs seconds of the run). The tables are the ones the harness database
 * creates (the TypeORM store's DDL, which the Prisma store shares). With
 * `HARNESS_TRANSACTIONAL=1` the effect row is written through getIdempotentTransaction(),
 * so the effect and the record commit together or not at all.
 */
import { ServiceUnavailableException } from '@nestjs/common';
import { PrismaMariaDb } from '@prisma/adapter-mariadb';
import { PrismaPg } from '@prisma/adapter-pg';
import { getIdempotentTransaction, PrismaIdempotencyStore, type PrismaClientLike } from '../../../lib/prisma/index.js';
import { mariadbConnection } from '../../support/mariadb.js';
import { pgConnection } from '../../support/postgres.js';
import type { Effect } from './invariant.js';
import { EFFECTS_TABLE } from './postgres.js';

interface HarnessPrismaClient extends PrismaClientLike {
  $disconnect(): Promise<void>;
}

type PrismaClientClass = new (options: { adapter: unknown }) => HarnessPrismaClient;

function loadClientClass(): PrismaClientClass {
  const path = process.env.HARNESS_PRISMA_CLIENT;
  if (!path) {
    throw new Error('HARNESS_PRISMA_CLIENT is required with HARNESS_STORE=prisma: the client.ts of a client generatedClientDir() made');
  }
  // A generated client, loaded through ts-require (in the processes) like the prisma tests load it.
  return (require(path) as { PrismaClient: PrismaClientClass }).PrismaClient;
}

export async function createPrismaBackend(options: { schema: string; applicationName: string }) {
  const PrismaClient = loadClientClass();
  const mariadb = process.env.HARNESS_DB === 'mariadb';
  const adapter = mariadb
    ? new PrismaMariaDb({
        host: mariadbConnection.host,
        port: mariadbConnection.port,
        user: mariadbConnection.username,
        password: mariadbConnection.password,
        database: options.schema,
        connectionLimit: 5,
      })
    : new PrismaPg(
        {
          host: pgConnection.host,
          port: pgConnection.port,
          user: pgConnection.username,
          password: pgConnection.password,
          database: pgConnection.database,
          max: 5,
          application_name: options.applicationName,
          options: `-c search_path=${options.schema}`,
        },
        // The adapter listens for the pool's errors itself (an idle client the server terminated).
        { schema: options.schema },
      );
  const prisma = new PrismaClient({ adapter });
  const keyColumn = mariadb ? '`key`' : 'key';
  return {
    store: new PrismaIdempotencyStore(prisma),
    /** Inserts the effect row in the running idempotent transaction. */
    async recordTransactionalEffect(effect: Effect): Promise<void> {
      const tx = getIdempotentTransaction();
      // The handler's own write failing on a dropped connection is the handler's error to
      // map; like a real app it answers 503 (retry later), the transaction is rolled back.
      await tx
        .$executeRawUnsafe(
          `INSERT INTO ${EFFECTS_TABLE} (${keyColumn}, effect_id, app, pid) VALUES (${mariadb ? '?, ?, ?, ?' : '$1, $2, $3, $4'})`,
          effect.key,
          effect.effectId,
          effect.app,
          effect.pid,
        )
        .catch((error: unknown) => {
          throw new ServiceUnavailableException(`database unavailable: ${(error as Error).message}`);
        });
    },
    close: () => prisma.$disconnect(),
  };
}
