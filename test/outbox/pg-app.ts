import { Body, Controller, HttpException, Module, Param, Post, type INestApplication, type LoggerService, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ClientProxy, ClientRMQ, ClientsModule, Transport } from '@nestjs/microservices';
import { Observable } from 'rxjs';
import { DataSource } from 'typeorm';
import { Idempotent, IdempotencyModule, IdempotencyOutbox, type OutboxRelayOptions } from '../../lib/index.js';
import { TypeOrmIdempotencyStore, getIdempotentEntityManager } from '../../lib/typeorm/index.js';
import { NEST_LOGGER, RABBITMQ_URL } from '../messages/support.js';
import { pgConnection } from '../support/postgres.js';

/** A DataSource on the test PostgreSQL, the records table `table` (with its outbox) and a refunds table beside it. */
export async function openPgOutbox(table: string): Promise<{ dataSource: DataSource; store: TypeOrmIdempotencyStore; refunds: string }> {
  const dataSource = new DataSource({ ...pgConnection, extra: { max: 6 } });
  await dataSource.initialize();
  const store = new TypeOrmIdempotencyStore(dataSource, { tableName: table });
  await store.ensureTable();
  const refunds = `"${table}_refunds"`;
  await dataSource.query(`CREATE TABLE IF NOT EXISTS ${refunds} ("id" varchar(64) PRIMARY KEY, "amount" integer NOT NULL)`);
  return { dataSource, store, refunds };
}

/** Drops what `openPgOutbox` created. */
export async function dropPgOutbox(dataSource: DataSource, table: string): Promise<void> {
  for (const name of [`${table}_refunds`, `${table}_outbox`, `${table}_steps`, table])
    await dataSource.query(`DROP TABLE IF EXISTS "${name}"`);
}

/**
 * A RabbitMQ client whose publishes never leave (the broker is never asked): the process is
 * stuck after its record completed and before its messages left, as one killed right there.
 */
class StuckRmqClient extends ClientRMQ {
  override emit<TResult = unknown, TInput = unknown>(pattern: unknown, data: TInput): Observable<TResult> {
    process.stdout.write(`SENDING ${JSON.stringify(pattern)}\n`);
    void data;
    return new Observable<TResult>(() => undefined);
  }
}

export interface PgRefundsApiOptions {
  store: TypeOrmIdempotencyStore;
  refunds: string;
  queue: string;
  /** @default RABBITMQ_URL */
  rabbitUrl?: string;
  outbox?: OutboxRelayOptions;
  /** The client's publishes never leave (see StuckRmqClient). */
  stuck?: boolean;
  /** The module's logger (configuration errors are written there). @default false */
  logger?: LoggerService | false;
}

/**
 * An HTTP API whose refund handler writes the refund and emits `refund.completed` in one
 * transaction with its record (`transactional: true`); `fail: true` throws after both.
 */
export async function startPgRefundsApi(options: PgRefundsApiOptions): Promise<INestApplication> {
  const { refunds } = options;
  @Controller('refunds')
  class RefundsController {
    constructor(private readonly outbox: IdempotencyOutbox) {}

    @Post(':id')
    @Idempotent({ transactional: true })
    async refund(
      @Param('id') refundId: string,
      @Body() body: { amount: number; fail?: boolean },
    ): Promise<{ refundId: string; messageIds: string[] }> {
      await getIdempotentEntityManager().query(`INSERT INTO ${refunds} ("id", "amount") VALUES ($1, $2)`, [refundId, body.amount]);
      const messageIds = [this.outbox.emit('EVENTS', 'refund.completed', { refundId, amount: body.amount })];
      if (body.fail) throw new HttpException('declined by the provider', 402);
      return { refundId, messageIds };
    }
  }

  const rmq = { urls: [options.rabbitUrl ?? RABBITMQ_URL], queue: options.queue, queueOptions: { durable: false } };
  @Module({
    imports: [
      IdempotencyModule.forRoot({
        store: options.store,
        logger: options.logger ?? false,
        outbox: { pollInterval: 100, retryDelay: 50, maxRetryDelay: 500, ...options.outbox },
      }),
      ClientsModule.register([
        options.stuck
          ? { name: 'EVENTS', customClass: StuckRmqClient as unknown as Type<ClientProxy>, options: rmq }
          : { name: 'EVENTS', transport: Transport.RMQ, options: rmq },
      ]),
    ],
    controllers: [RefundsController],
  })
  class ApiModule {}

  const app = await NestFactory.create(ApiModule, { logger: NEST_LOGGER });
  await app.init();
  return app;
}
