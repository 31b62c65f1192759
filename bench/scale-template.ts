/**
 * The one real record each population of bench/scale.ts is copied from: a POST through an
 * `@Idempotent` route of a small Nest application (Express) on the store under test, so
 * the key (a SHA-256 storage key), the fingerprint and the stored result are exactly what
 * the library writes for an HTTP request. The fill then replicates that record with other
 * keys, server-side (SQL, bench/scale-sql.ts) or pipelined (Redis, bench/scale-redis.ts):
 * `ScaleTarget` is what both do, so that bench/scale.ts runs one loop over either.
 */
import 'reflect-metadata';
import { randomBytes, randomUUID } from 'node:crypto';
import { Body, Controller, HttpCode, Module, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { CompleteRequest, IdempotencyStore } from '../lib/core/index.js';
import { CountingStore } from './counting-store.js';
import { loadLib } from './lib.js';

/** Retention of the template record (and of the live records copied from it): long enough for any run. */
export const TEMPLATE_TTL_MS = 24 * 60 * 60 * 1000;

/**
 * A JSON response body of about `bytes` bytes (within a few), shaped like an API answer:
 * an order with line items whose ids and amounts vary, so that it compresses about as
 * well as real JSON does (PostgreSQL compresses a result over about 2 KB in TOAST; a
 * body of repeated characters would make that look far better than it is).
 */
export function responseBody(bytes: number): Record<string, unknown> {
  const body: { id: string; status: string; currency: string; items: unknown[]; note?: string } = {
    id: `ord_${randomBytes(8).toString('hex')}`,
    status: 'confirmed',
    currency: 'EUR',
    items: [],
  };
  for (;;) {
    const item = {
      sku: `SKU-${randomBytes(3).toString('hex').toUpperCase()}`,
      name: `Item ${randomBytes(4).toString('base64url')}`,
      qty: 1 + (randomBytes(1)[0] % 9),
      unitPrice: Number((randomBytes(2).readUInt16BE(0) / 100).toFixed(2)),
    };
    if (JSON.stringify({ ...body, items: [...body.items, item] }).length > bytes) break;
    body.items.push(item);
  }
  const missing = bytes - JSON.stringify(body).length - ',"note":""'.length;
  if (missing > 0) body.note = randomBytes(missing).toString('base64url').slice(0, missing);
  return body;
}

/** What the route stored: its storage key and what was passed to `complete()`. */
export interface WrittenRecord {
  key: string;
  /** The serialized outcome the store received (the `result` column / `r` field). */
  result: string;
  ttl: number;
  /** Size of the JSON body the client received. */
  bodyBytes: number;
}

/** The template as its store holds it (`record`, what the fill copies), and what the timed calls write. */
export interface Template<R> {
  written: WrittenRecord;
  record: R;
  fingerprint: string | undefined;
  result: string;
  /** The record for the report's JSON, long values shortened. */
  shown: unknown;
}

/** What a population takes: the table with its indexes (SQL), or the keys' memory (Redis). */
export interface TableBytes {
  rows: number;
  /** Table + indexes (+ TOAST), bytes. */
  total: number;
  detail: Record<string, number>;
}

/** A store of the scale run; a "space" is a table (SQL) or a key prefix (Redis). */
export interface ScaleTarget<R> {
  /** The server's version and the settings that decide how much stays in memory. */
  describe(): Promise<string>;
  store(space: string): IdempotencyStore;
  create(space: string): Promise<void>;
  drop(space: string): Promise<void>;
  template(space: string, bodyBytes: number): Promise<Template<R>>;
  /** Copies of `template` under the keys `from` .. `to - 1` of `population`; how long it took, ms. */
  fill(space: string, population: string, template: R, from: number, to: number): Promise<number>;
  /** After a bulk fill, the state a table of that size has in production (SQL only). */
  settle?(space: string): Promise<{ ms: number; dirtyPagesLeft?: number }>;
  bytes(space: string, population: string, size: number): Promise<{ bytes: TableBytes; encodings?: string[] }>;
  /** Free bytes where the data goes: a fill that would not fit is left out. */
  freeBytes(): Promise<number>;
  close(): Promise<void>;
}

/** Remembers the key and request of the completion the engine sends. */
class CompletionRecorder extends CountingStore {
  completed: { key: string; request: CompleteRequest } | undefined;
  override complete(key: string, token: string, request: CompleteRequest): Promise<boolean> {
    this.completed = { key, request };
    return super.complete(key, token, request);
  }
}

/** Writes one record through a real `@Idempotent` POST whose handler answers a body of `bodyBytes`. */
export async function recordThroughHttp(store: IdempotencyStore, bodyBytes: number): Promise<WrittenRecord> {
  const { Idempotent, IdempotencyModule } = loadLib();
  const recorder = new CompletionRecorder(store);
  const body = responseBody(bodyBytes);

  @Controller()
  class OrdersController {
    @Post('orders')
    @HttpCode(201)
    @Idempotent({ store: recorder, ttl: TEMPLATE_TTL_MS })
    create(@Body() _request: unknown) {
      return body;
    }
  }
  @Module({ imports: [IdempotencyModule.forRoot({ isGlobal: true })], controllers: [OrdersController] })
  class TemplateModule {}

  const app: INestApplication = await NestFactory.create(TemplateModule, { logger: false });
  try {
    await app.listen(0, '127.0.0.1');
    const { port } = app.getHttpServer().address() as { port: number };
    const response = await fetch(`http://127.0.0.1:${port}/orders`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': randomUUID() },
      body: JSON.stringify({ customer: 'cus_42', amount: 1999 }),
    });
    const text = await response.text();
    if (response.status !== 201 || !recorder.completed) throw new Error(`the template request answered ${response.status}: ${text}`);
    const { key, request } = recorder.completed;
    return { key, result: request.result, ttl: request.ttl, bodyBytes: Buffer.byteLength(text) };
  } finally {
    await app.close();
  }
}
