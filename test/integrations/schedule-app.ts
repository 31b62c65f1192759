import { Injectable, Module, type INestApplicationContext, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, Interval, ScheduleModule } from '@nestjs/schedule';
import type Redis from 'ioredis';
import { Idempotent, IdempotencyModule, type IdempotencyModuleOptions } from '../../lib/index.js';

export interface ScheduleAppOptions {
  prefix: string;
  /** Counts the runs in Redis, shared by every instance. */
  redis: Redis;
  idempotency: IdempotencyModuleOptions;
  /** Which instance this is, for the run log. */
  instance: string;
  cron?: { name: string; expression: string };
  interval?: { name: string; every: number };
}

/** Runs of the cron job by 2 s slot (the epoch second it starts at), and of the interval job in a list. */
export const cronRunsKey = (prefix: string) => `${prefix}:cron-runs`;
export const intervalRunsKey = (prefix: string) => `${prefix}:interval-runs`;

/** One instance of an application that runs the same schedule as its siblings. */
export async function startScheduleApp(options: ScheduleAppOptions): Promise<INestApplicationContext> {
  const { prefix, redis, instance } = options;
  const providers: Type<unknown>[] = [];
  if (options.cron) {
    @Injectable()
    class SettlementJob {
      @Cron(options.cron!.expression, { name: options.cron!.name })
      @Idempotent()
      async settle(): Promise<void> {
        // The test's cron fires every 2 s: a tick, even one late by most of a second, lands in its own 2 s slot.
        await redis.hincrby(cronRunsKey(prefix), String(Math.floor(Date.now() / 2000) * 2), 1);
      }
    }
    providers.push(SettlementJob);
  }
  if (options.interval) {
    @Injectable()
    class SweepJob {
      @Idempotent()
      @Interval(options.interval!.name, options.interval!.every)
      async sweep(): Promise<void> {
        await redis.rpush(intervalRunsKey(prefix), `${instance}@${Date.now()}`);
      }
    }
    providers.push(SweepJob);
  }
  @Module({ imports: [IdempotencyModule.forRoot({ logger: false, ...options.idempotency }), ScheduleModule.forRoot()], providers })
  class ScheduleAppModule {}
  const app = await NestFactory.createApplicationContext(ScheduleAppModule, { logger: false });
  await app.init();
  return app;
}
