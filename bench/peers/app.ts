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
import { join } from 'node:path';
import { charge, listen, TTL, type ChargeBody } from '../app.js';
import { serveParent } from '../harness.js';
import { loadLib } from '../lib.js';
import { openStore } from '../stores.js';

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

function peerRequire<T>(name: string): T {
  return require(require.resolve(name, { paths: [PEERS_DIR] })) as T;
}

async function start(config: PeersAppConfig): Promise<{ app: INestApplication; close: () => Promise<void> }> {
  const lib = loadLib();
  const peer = peerRequire<Record<string, any>>('@node-idempotency/nestjs');
  const prefix = `bench:${config.runId}:`;

  // This library's store as `npm run bench` opens it (bench/stores.ts; the near cache on before it is measured). Its
  // close removes every key under `bench:<runId>:`, the peer's too.
  const opened = await openStore(config.store, { runId: config.runId, redisUrl: config.redisUrl, autoPipelining: config.autoPipelining });
  const store = opened.store.inner;

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

  const app = await listen(PeersBenchModule, config.platform);
  return {
    app,
    close: async () => {
      await app.close();
      await opened.close().catch(() => undefined);
    },
  };
}

if (require.main === module) {
  serveParent<{ id: number; type: 'cpu' | 'close' }>(async () => {
    const { app, close } = await start(JSON.parse(process.env.BENCH_PEERS_CONFIG ?? '{}') as PeersAppConfig);
    const version = (name: string) => (require(join(PEERS_DIR, 'node_modules', name, 'package.json')) as { version: string }).version;
    return {
      ready: {
        port: (app.getHttpServer().address() as { port: number }).port,
        nest: version('@nestjs/core'),
        peer: version('@node-idempotency/nestjs'),
      },
      answer: async () => {
        const cpu = process.cpuUsage();
        return { type: 'cpu', cpuMicros: cpu.user + cpu.system };
      },
      close,
    };
  });
}
