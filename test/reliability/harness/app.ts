/**
 * One application process of the invariant harness, run as a real child process:
 *
 *   node -r ./test/support/ts-require.js test/reliability/harness/app.ts
 *
 * Configured through environment variables (see `AppEnv` in app-processes.ts). It
 * listens on a free port chosen by the OS and prints `READY <port>` once it serves.
 *
 * The one route, `POST /work`, is `@Idempotent()` and performs a side effect that the
 * checker can count afterwards: one line appended (synchronously, so a SIGKILL cannot
 * lose an acknowledged line) to this process's own effect log. Its response carries the
 * id of that effect, so the checker can tell a replay from a second execution.
 *
 * Client-controlled behaviour comes from headers, which are not part of the request
 * fingerprint, so a retry of a failed or slowed request is the same request:
 * - `x-fail: 1`       the handler throws (502) before any effect: the key is released;
 * - `x-delay-ms: n`   the handler waits n ms before its effect (slow handler, or a
 *                     request left hanging so that the process can be killed mid-handler).
 */
import 'reflect-metadata';
import { appendFileSync, mkdirSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { Body, Controller, Headers, HttpException, Module, Post, type DynamicModule } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Idempotent, IdempotencyModule, IdempotencyService, MemoryIdempotencyStore, type IdempotencyStore } from '../../../lib/index.js';

const env = process.env;
const effectDir = required('HARNESS_EFFECT_DIR');
const leaseTtl = Number(env.HARNESS_LEASE_TTL ?? 2_000);
const appName = env.HARNESS_APP_NAME ?? `app-${process.pid}`;
mkdirSync(effectDir, { recursive: true });
const effectLog = join(effectDir, `effects-${appName}-${process.pid}.log`);
const startedLog = join(effectDir, `started-${appName}-${process.pid}.log`);

function required(name: string): string {
  const value = env[name];
  if (!value) throw new Error(`${name} is required by the harness app`);
  return value;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const transactional = env.HARNESS_TRANSACTIONAL === '1';

interface Backend {
  store: IdempotencyStore;
  /** Writes the effect; by default a line in this process's effect log. */
  recordEffect(effect: Effect): Promise<void>;
  close(): Promise<void>;
}

interface Effect {
  key: string;
  effectId: string;
  app: string;
  pid: number;
}

async function appendEffect(effect: Effect): Promise<void> {
  appendFileSync(effectLog, JSON.stringify(effect) + '\n');
}

async function createBackend(): Promise<Backend> {
  const kind = env.HARNESS_STORE ?? 'memory';
  if (kind === 'memory') return { store: new MemoryIdempotencyStore(), recordEffect: appendEffect, close: async () => {} };
  if (kind === 'redis') {
    const { Redis } = await import('ioredis');
    const { RedisIdempotencyStore, recommendedRedisOptions } = await import('../../../lib/redis/index.js');
    const client = new Redis({
      host: '127.0.0.1',
      port: Number(required('HARNESS_REDIS_PORT')),
      lazyConnect: true,
      ...recommendedRedisOptions({ commandTimeout: 1_000, connectTimeout: 1_000, maxReconnectDelay: 200 }),
    });
    // A refused reconnection is expected while the harness has Redis down; ioredis logs unhandled 'error' events.
    client.on('error', () => {});
    await client.connect();
    return {
      store: new RedisIdempotencyStore(client, { prefix: required('HARNESS_PREFIX'), nearCache: env.HARNESS_NEAR_CACHE === '1' }),
      recordEffect: appendEffect,
      close: async () => void client.disconnect(),
    };
  }
  if (kind === 'typeorm') {
    const { createTypeOrmBackend } = await import('./typeorm-backend.js');
    const backend = await createTypeOrmBackend({ schema: required('HARNESS_PG_SCHEMA'), applicationName: required('HARNESS_PG_APP_NAME') });
    return {
      store: backend.store,
      recordEffect: transactional ? (effect) => backend.recordTransactionalEffect(effect) : appendEffect,
      close: backend.close,
    };
  }
  if (kind === 'drizzle') {
    const { createDrizzleBackend } = await import('./drizzle-backend.js');
    const backend = await createDrizzleBackend({ schema: required('HARNESS_PG_SCHEMA'), applicationName: required('HARNESS_PG_APP_NAME') });
    return {
      store: backend.store,
      recordEffect: transactional ? (effect) => backend.recordTransactionalEffect(effect) : appendEffect,
      close: backend.close,
    };
  }
  if (kind === 'prisma') {
    const { createPrismaBackend } = await import('./prisma-backend.js');
    const backend = await createPrismaBackend({ schema: required('HARNESS_PG_SCHEMA'), applicationName: required('HARNESS_PG_APP_NAME') });
    return {
      store: backend.store,
      recordEffect: transactional ? (effect) => backend.recordTransactionalEffect(effect) : appendEffect,
      close: backend.close,
    };
  }
  throw new Error(`unknown HARNESS_STORE ${kind}`);
}

interface WorkBody {
  payload?: unknown;
}

function buildController(backend: Backend) {
  @Controller()
  class WorkController {
    constructor(private readonly idempotency: IdempotencyService) {}

    /** Support tooling's forget() of a `/work` key (the near cache scenario forgets from another process). */
    @Post('forget')
    forget(@Headers('idempotency-key') key: string) {
      return this.idempotency.forget(key, { operation: 'POST /work' });
    }

    /** The Redis store's near cache statistics, or null. */
    @Post('near-cache-stats')
    nearCacheStats() {
      return (backend.store as { nearCacheStats?: () => unknown }).nearCacheStats?.() ?? null;
    }

    @Post('work')
    @Idempotent({ leaseTtl, inFlight: 'reject', transactional })
    async work(
      @Body() body: WorkBody,
      @Headers('idempotency-key') key: string,
      @Headers('x-fail') fail?: string,
      @Headers('x-delay-ms') delay?: string,
    ) {
      appendFileSync(startedLog, JSON.stringify({ key }) + '\n');
      if (fail === '1') throw new HttpException({ message: 'injected failure' }, 502);
      const delayMs = Number(delay ?? 0);
      if (delayMs > 0) await sleep(delayMs);
      const effectId = randomUUID();
      await backend.recordEffect({ key, effectId, app: appName, pid: process.pid });
      return { key, effectId, app: appName, payload: body.payload ?? null };
    }
  }
  return WorkController;
}

async function main(): Promise<void> {
  const backend = await createBackend();
  const idempotency: DynamicModule = IdempotencyModule.forRoot({ store: backend.store, leaseTtl });
  @Module({ imports: [idempotency], controllers: [buildController(backend)] })
  class HarnessAppModule {}
  const app = await NestFactory.create(HarnessAppModule, { logger: env.HARNESS_LOG === '1' ? ['error'] : false });
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address() as { port: number };
  process.stdout.write(`READY ${address.port}\n`);
  const shutdown = async () => {
    await app.close();
    await backend.close();
    process.exit(0);
  };
  process.once('SIGTERM', () => void shutdown());
  // The harness owns this process: when it goes away (stdin closes), so does the app.
  process.stdin.resume();
  process.stdin.once('end', () => void shutdown());
}

main().catch((error: unknown) => {
  process.stderr.write(`harness app failed to start: ${(error as Error).stack ?? String(error)}\n`);
  process.exit(1);
});
