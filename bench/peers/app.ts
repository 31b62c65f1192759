/**
 * The app of `npm run bench:peers`, in a child process of bench/peers/run.ts: NestJS 11
 * (Express or Fastify) with one POST handler mounted bare (`/bare`), under this
 * library's `@Idempotent()` (`/ours/first`) and under @node-idempotency/nestjs's
 * (`/peer/first`), both on the same kind of store (memory, or Redis), so that the
 * parent can interleave the three. Store `redisNear`: this library's Redis store with
 * its near cache on, beside the peer on plain Redis (the peer has no near cache).
 */
import { PEERS_DIR } from './nest11.js';
import 'reflect-metadata';
import { Body, Controller, HttpCode, Module, Post, type INestApplication, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { join } from 'node:path';
import { deleteByPrefix } from '../harness.js';
import { loadLib, loadLibModule } from '../lib.js';

export interface PeersAppConfig {
  platform: 'express' | 'fastify';
  store: 'memory' | 'redis' | 'redisNear';
  runId: string;
  redisUrl: string;
  /** ioredis `enableAutoPipelining` of this library's client, as in bench/stores.ts. */
  autoPipelining: boolean;
}

export type PeersChildMessage =
  | { type: 'ready'; port: number; nest: string; peer: string }
  | { type: 'failed'; error: string }
  | { id: number; type: 'cpu'; cpuMicros: number }
  | { id: number; type: 'closed' };

/** Retention of bench records on both sides: long enough for one bench. */
const TTL = 10 * 60 * 1000;

interface ChargeBody {
  amount: number;
}

/** The same handler as bench/app.ts: a little real work, a small JSON answer. */
function charge(body: ChargeBody, counter: { n: number }): { id: string; amount: number; status: string } {
  return { id: `ch_${++counter.n}`, amount: body.amount, status: 'succeeded' };
}

function peerRequire<T>(name: string): T {
  return require(require.resolve(name, { paths: [PEERS_DIR] })) as T;
}

/** Waits until the near cache answers (its tracking proven), so that it is measured on and not while it switches on. */
async function nearCacheOn(store: import('../../lib/redis/index.js').RedisIdempotencyStore): Promise<void> {
  await store.verify();
  const deadline = Date.now() + 5_000;
  while (!store.nearCacheStats()?.enabled) {
    if (Date.now() > deadline) throw new Error('the near cache did not switch on within 5 s');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

async function start(config: PeersAppConfig): Promise<{ app: INestApplication; close: () => Promise<void> }> {
  const lib = loadLib();
  const peer = peerRequire<Record<string, any>>('@node-idempotency/nestjs');
  const prefix = `bench:${config.runId}:`;
  const closers: Array<() => Promise<void>> = [];

  let store: InstanceType<typeof lib.MemoryIdempotencyStore> | import('../../lib/core/index.js').IdempotencyStore;
  if (config.store === 'redis' || config.store === 'redisNear') {
    const near = config.store === 'redisNear';
    const { Redis } = await import('ioredis');
    const { RedisIdempotencyStore, recommendedRedisOptions } = loadLibModule<typeof import('../../lib/redis/index.js')>('redis/index.ts');
    // As bench/stores.ts creates it, so that both benches measure the same client.
    const client = new Redis(config.redisUrl, {
      ...recommendedRedisOptions(),
      enableAutoPipelining: config.autoPipelining,
      lazyConnect: true,
    });
    client.on('error', () => undefined);
    await client.connect();
    // The near cache's records under their own prefix, as in bench/stores.ts.
    const redisStore = new RedisIdempotencyStore(
      client,
      near ? { prefix: `${prefix}ours-near:`, nearCache: true } : { prefix: `${prefix}ours:` },
    );
    store = redisStore;
    closers.push(async () => {
      await redisStore.close();
      await deleteByPrefix(client, prefix);
      await client.quit();
    });
    if (near) await nearCacheOn(redisStore);
  } else {
    store = new lib.MemoryIdempotencyStore();
  }

  const counter = { n: 0 };
  const { Idempotent } = lib;
  const PeerIdempotent = peer.Idempotent as (options?: object) => MethodDecorator;

  @Controller()
  class BenchController {
    @Post('bare')
    @HttpCode(201)
    bare(@Body() body: ChargeBody) {
      return charge(body, counter);
    }

    @Post('ours/first')
    @HttpCode(201)
    @Idempotent({ store, ttl: TTL })
    ours(@Body() body: ChargeBody) {
      return charge(body, counter);
    }
  }

  // The peer's route in a controller of its own: its decorator adds an interceptor, and an
  // interceptor on a class with an @Idempotent() method makes IdempotencyModule place its
  // interceptor first among the global ones, on every route of the app, /bare included
  // (which then cost more than the peer's replays: docs/performance.md, "What we learned").
  @Controller()
  class PeerController {
    @Post('peer/first')
    @HttpCode(201)
    @PeerIdempotent()
    theirs(@Body() body: ChargeBody) {
      return charge(body, counter);
    }
  }

  const peerStorage = config.store !== 'memory' ? { adapter: 'redis', options: { url: config.redisUrl } } : { adapter: 'memory' };
  @Module({
    imports: [
      lib.IdempotencyModule.forRoot({ isGlobal: true }),
      peer.NodeIdempotencyModule.forRootAsync({ storage: peerStorage, cacheKeyPrefix: `${prefix}peer`, cacheTTLMS: TTL }),
    ],
    controllers: [BenchController as Type<unknown>, PeerController as Type<unknown>],
  })
  class PeersBenchModule {}

  let app: INestApplication;
  if (config.platform === 'fastify') {
    const { FastifyAdapter } = await import('@nestjs/platform-fastify');
    app = await NestFactory.create(PeersBenchModule, new FastifyAdapter() as never, { logger: false });
  } else {
    app = await NestFactory.create(PeersBenchModule, { logger: false });
  }
  await app.listen(0, '127.0.0.1');
  return {
    app,
    close: async () => {
      await app.close();
      for (const close of closers) await close().catch(() => undefined);
    },
  };
}

if (require.main === module) {
  const config = JSON.parse(process.env.BENCH_PEERS_CONFIG ?? '{}') as PeersAppConfig;
  const send = (message: PeersChildMessage) => process.send!(message);
  process.once('disconnect', () => process.exit(0));
  start(config).then(
    ({ app, close }) => {
      const address = app.getHttpServer().address() as { port: number };
      process.on('message', (message: { id: number; type: 'cpu' | 'close' }) => {
        if (message.type === 'cpu') {
          const cpu = process.cpuUsage();
          send({ id: message.id, type: 'cpu', cpuMicros: cpu.user + cpu.system });
        } else {
          void close().then(() => {
            send({ id: message.id, type: 'closed' });
            process.exit(0);
          });
        }
      });
      const version = (name: string) => (require(join(PEERS_DIR, 'node_modules', name, 'package.json')) as { version: string }).version;
      send({ type: 'ready', port: address.port, nest: version('@nestjs/core'), peer: version('@node-idempotency/nestjs') });
    },
    (error: unknown) => {
      send({ type: 'failed', error: error instanceof Error ? (error.stack ?? error.message) : String(error) });
      process.exit(1);
    },
  );
}
