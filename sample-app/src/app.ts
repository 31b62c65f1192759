import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import type { INestApplication, LogLevel } from '@nestjs/common';
import { Redis } from 'ioredis';
import { MemoryIdempotencyStore } from '../../lib/index.js';
import { MemoryLockProvider } from '../../lib/locks/index.js';
import { RedisIdempotencyStore, RedisLockProvider, RedisOneTimeTokenStore, recommendedRedisOptions } from '../../lib/redis/index.js';
import { MemoryOneTimeTokenStore } from '../../lib/tokens/index.js';
import { TypeOrmIdempotencyStore } from '../../lib/typeorm/index.js';
import type { SampleAppConfig } from './config.js';
import { openDatabase } from './database.js';
import { SampleAppModule, type SampleAppResources } from './app.module.js';
import { connectRabbitMq } from './messages/amqp.js';

export interface CreateSampleAppOptions {
  /** Nest log levels. @default ['error', 'warn'] */
  logger?: LogLevel[] | false;
}

/**
 * Opens the stores the config asks for and builds the Nest application, not listening
 * yet. With AMQP_URL, also call `app.startAllMicroservices()` to consume RabbitMQ.
 */
export async function createSampleApp(config: SampleAppConfig, options: CreateSampleAppOptions = {}): Promise<INestApplication> {
  const closers: Array<() => Promise<void>> = [];
  const opened = await openResources(config);
  // Closed in reverse order of opening when the app closes (see ResourcesCloser).
  const resources: SampleAppResources = {
    ...opened,
    close: async () => {
      for (const close of closers.reverse()) await close().catch(() => undefined);
      await opened.close();
    },
  };
  try {
    const app = await NestFactory.create(SampleAppModule.register(config, resources), { logger: options.logger ?? ['error', 'warn'] });
    closers.push(connectRabbitMq(app, config));
    return app;
  } catch (error) {
    await resources.close();
    await resources.dataSource.destroy();
    throw error;
  }
}

async function openResources(config: SampleAppConfig): Promise<SampleAppResources> {
  const dataSource = await openDatabase(config);
  // The refund flow's records and steps, beside the business tables (refunds/refund-flow.ts).
  // ensureTable() adds the steps table, which synchronize does not know about.
  const flowStore = new TypeOrmIdempotencyStore(dataSource);
  try {
    await flowStore.ensureTable();
  } catch (error) {
    await dataSource.destroy();
    throw error;
  }
  if (!config.redisUrl) {
    return {
      dataSource,
      flowStore,
      store: new MemoryIdempotencyStore(),
      tokenStore: new MemoryOneTimeTokenStore(),
      locks: new MemoryLockProvider(),
      close: async () => {},
    };
  }
  // Fail fast while Redis is down (503 instead of requests hanging), reconnect by itself.
  const redis = new Redis(config.redisUrl, { ...recommendedRedisOptions(), lazyConnect: true });
  try {
    await redis.connect();
  } catch (error) {
    redis.disconnect();
    await dataSource.destroy();
    throw error;
  }
  return {
    dataSource,
    flowStore,
    store: new RedisIdempotencyStore(redis, { prefix: config.redisPrefix }),
    tokenStore: new RedisOneTimeTokenStore(redis, { prefix: `${config.redisPrefix}token:` }),
    locks: new RedisLockProvider(redis, { prefix: `${config.redisPrefix}lock:` }),
    close: async () => {
      await redis.quit().catch(() => redis.disconnect());
    },
  };
}
