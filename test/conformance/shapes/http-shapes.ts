import type { INestApplication, Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import request from 'supertest';
import { MemoryIdempotencyStore } from '../../../lib/index.js';

/**
 * The ecosystem catalogue's HTTP harness: one shape of a real Nest application (an
 * authentication library, a tenancy scheme, a routing feature), two requests that must
 * not share a record (two callers, or two operations), and a retry that must replay.
 */

export type Platform = 'express' | 'fastify';

/** One HTTP request of a shape: where it goes and what it carries besides the key. */
export interface ShapeRequest {
  readonly method?: 'post' | 'put';
  readonly path: string;
  readonly headers?: Record<string, string>;
  readonly body?: object;
}

export interface SeenAnswer {
  readonly status: number;
  readonly body: unknown;
  readonly text: string;
  readonly replayed: boolean;
  readonly code?: string;
}

/** Boots `module` on `platform` (Fastify made ready), `configure` before init (middleware, prefix, versioning). */
export async function bootShape(
  platform: Platform,
  module: Type<unknown>,
  configure?: (app: INestApplication) => void,
): Promise<INestApplication> {
  const app =
    platform === 'fastify'
      ? await NestFactory.create(module, new FastifyAdapter(), { logger: false })
      : await NestFactory.create(module, { logger: false });
  configure?.(app);
  await app.init();
  if (platform === 'fastify') await (app.getHttpAdapter().getInstance() as { ready(): Promise<void> }).ready();
  return app;
}

export async function send(app: INestApplication, key: string, call: ShapeRequest): Promise<SeenAnswer> {
  let test = request(app.getHttpServer())[call.method ?? 'post'](call.path).set('Idempotency-Key', key);
  for (const [name, value] of Object.entries(call.headers ?? {})) test = test.set(name, value);
  const response = await test.send(call.body ?? { amount: 5 });
  const body = response.body as { code?: unknown } | undefined;
  return {
    status: response.status,
    body: response.body,
    text: response.text,
    replayed: response.headers['idempotent-replayed'] === 'true',
    code: typeof body?.code === 'string' ? body.code : undefined,
  };
}

let keys = 0;
/** A key no other check of the process uses. */
export function freshKey(shape: string): string {
  return `shape-${shape.replace(/[^A-Za-z0-9]+/g, '-')}-${process.pid}-${++keys}`;
}

/**
 * The check every shape passes: `first` runs, `second` (same key, same body) runs too and
 * gets its own answer (never the first's, never replayed), and a retry of `first` replays
 * the first answer byte for byte. `runs()` counts the handler's executions.
 */
export async function expectApart(
  app: INestApplication | { first: INestApplication; second: INestApplication },
  first: ShapeRequest,
  second: ShapeRequest,
  runs: () => number,
  shape: string,
): Promise<void> {
  const [appA, appB] = 'first' in app ? [app.first, app.second] : [app, app];
  const key = freshKey(shape);
  const before = runs();
  const a = await send(appA, key, first);
  expect({ shape, status: a.status, replayed: a.replayed }).toEqual({ shape, status: 201, replayed: false });
  const b = await send(appB, key, second);
  expect({ shape, status: b.status, replayed: b.replayed }).toEqual({ shape, status: 201, replayed: false });
  expect(b.text).not.toBe(a.text);
  expect(runs()).toBe(before + 2);
  const retry = await send(appA, key, first);
  expect({ shape, status: retry.status, replayed: retry.replayed, text: retry.text }).toEqual({
    shape,
    status: 201,
    replayed: true,
    text: a.text,
  });
  expect(runs()).toBe(before + 2);
}

/** A store shared by apps of one process (two apps, one store). */
export function sharedStore(): MemoryIdempotencyStore {
  return new MemoryIdempotencyStore();
}
