/**
 * Redis for bench/scale.ts: populations copied, pipelined, from the raw hash of one record
 * the store wrote (the same fields in the same order, the same TTL), their memory
 * (`MEMORY USAGE` of a sample, and the `used_memory` delta), and their removal.
 */
import type { Redis } from 'ioredis';
import { deleteByPrefix } from './harness.js';
import { loadLibModule } from './lib.js';
import { populationKey } from './scale-measure.js';
import { recordThroughHttp, type ScaleTarget, type TableBytes, type Template } from './scale-template.js';

type RedisLib = typeof import('../lib/redis/index.js');

/** One record as Redis holds it. */
export interface RawRecord {
  /** Field, value, field, value... in the order HGETALL returned them. */
  fields: string[];
  /** The key's remaining TTL when read, ms. */
  pttl: number;
  /** OBJECT ENCODING (`listpack` while every value is at most hash-max-listpack-value bytes, else `hashtable`). */
  encoding: string;
}

/** Keys per pipeline: big enough that round trips do not count, small enough to keep replies bounded. */
const PIPELINE_KEYS = 2_000;

export class RedisTarget implements ScaleTarget<RawRecord> {
  private readonly lib: RedisLib;
  /** `used_memory` once each prefix's template was written, before its fill: what its population added is measured from there. */
  private readonly memoryBefore = new Map<string, number>();

  private constructor(readonly client: Redis) {
    this.lib = loadLibModule<RedisLib>('redis/index.ts');
  }

  static async open(url: string): Promise<RedisTarget> {
    const { Redis } = require('ioredis') as typeof import('ioredis');
    const { recommendedRedisOptions } = loadLibModule<RedisLib>('redis/index.ts');
    const client = new Redis(url, { ...recommendedRedisOptions(), lazyConnect: true, commandTimeout: 60_000 });
    // Errors surface through the commands (and fail the run).
    client.on('error', () => undefined);
    await client.connect();
    return new RedisTarget(client);
  }

  store(prefix: string): import('../lib/redis/index.js').RedisIdempotencyStore {
    return new this.lib.RedisIdempotencyStore(this.client, { prefix });
  }

  /** A prefix needs no making. */
  async create(): Promise<void> {}

  /** Removes every key under `prefix` (SCAN + UNLINK). */
  drop(prefix: string): Promise<void> {
    return deleteByPrefix(this.client, prefix);
  }

  /** One record written through HTTP under `prefix`, read back raw as the fill copies it. */
  async template(prefix: string, bodyBytes: number): Promise<Template<RawRecord>> {
    const store = this.store(prefix);
    const written = await recordThroughHttp(store, bodyBytes);
    const raw = await this.rawRecord(store.redisKey(written.key));
    this.memoryBefore.set(prefix, await this.usedMemory());
    const field = (name: string) => raw.fields[raw.fields.indexOf(name) + 1];
    return {
      written,
      record: raw,
      fingerprint: field('f'),
      result: field('r'),
      shown: { ...written, raw: { ...raw, fields: raw.fields.map((v, i) => (i % 2 && v.length > 80 ? `${v.length} characters` : v)) } },
    };
  }

  /** The Redis key of row `i` of a population (the store's own key format, `<prefix>{<key>}`). */
  private keyOf(prefix: string, population: string, i: number): string {
    return `${prefix}{${populationKey(population, i)}}`;
  }

  private async rawRecord(redisKey: string): Promise<RawRecord> {
    const flat = (await this.client.call('HGETALL', redisKey)) as string[];
    if (flat.length === 0) throw new Error(`no record under ${redisKey}`);
    const pttl = await this.client.pttl(redisKey);
    const encoding = String(await this.client.call('OBJECT', 'ENCODING', redisKey));
    return { fields: flat, pttl, encoding };
  }

  /** Keys `from` .. `to - 1` of `population`: the template's HSET and PEXPIRE, pipelined. */
  async fill(prefix: string, population: string, raw: RawRecord, from: number, to: number): Promise<number> {
    const startedAt = Date.now();
    // Two pipelines in flight: Redis stays busy while the next one is built.
    let pending: Promise<unknown> | undefined;
    for (let start = from; start < to; start += PIPELINE_KEYS) {
      const pipeline = this.client.pipeline();
      for (let i = start; i < Math.min(to, start + PIPELINE_KEYS); i++) {
        const key = this.keyOf(prefix, population, i);
        pipeline.hset(key, ...raw.fields).pexpire(key, raw.pttl);
      }
      const sent = pipeline.exec().then(failedCommand);
      if (pending) await pending;
      pending = sent;
    }
    await pending;
    return Date.now() - startedAt;
  }

  /** Mean `MEMORY USAGE ... SAMPLES 0` (exact for a hash) of `sample` keys spread over the population, and their encodings. */
  private async memoryUsage(
    prefix: string,
    population: string,
    size: number,
    sample: number,
  ): Promise<{ meanBytes: number; encodings: string[] }> {
    const pipeline = this.client.pipeline();
    const keys: string[] = [];
    for (let n = 0; n < Math.min(sample, size); n++)
      keys.push(this.keyOf(prefix, population, Math.floor((n * size) / Math.min(sample, size))));
    for (const key of keys) pipeline.call('MEMORY', 'USAGE', key, 'SAMPLES', '0');
    for (const key of keys) pipeline.call('OBJECT', 'ENCODING', key);
    const replies = (await pipeline.exec()) ?? [];
    const usages = replies.slice(0, keys.length).map(([, value]) => Number(value));
    const encodings = [...new Set(replies.slice(keys.length).map(([, value]) => String(value)))];
    return { meanBytes: usages.reduce((a, b) => a + b, 0) / usages.length, encodings };
  }

  /** What `size` records of `population` take: the mean `MEMORY USAGE` of 1 000 of them, and the `used_memory` delta per key. */
  async bytes(prefix: string, population: string, size: number): Promise<{ bytes: TableBytes; encodings: string[] }> {
    const usage = await this.memoryUsage(prefix, population, size, 1_000);
    const delta = (await this.usedMemory()) - (this.memoryBefore.get(prefix) ?? Number.NaN);
    return {
      bytes: {
        rows: size,
        total: usage.meanBytes * size,
        detail: { memoryUsageMean: usage.meanBytes, usedMemoryDeltaPerKey: delta / size },
      },
      encodings: usage.encodings,
    };
  }

  /** Memory is not bounded by a disk here. */
  async freeBytes(): Promise<number> {
    return Number.POSITIVE_INFINITY;
  }

  async usedMemory(): Promise<number> {
    const info = await this.client.info('memory');
    return Number(/used_memory:(\d+)/.exec(info)?.[1] ?? Number.NaN);
  }

  async dbSize(): Promise<number> {
    return this.client.dbsize();
  }

  async describe(): Promise<string> {
    const info = await this.client.info('server');
    const memory = await this.client.config('GET', 'hash-max-listpack-value');
    return `Redis ${/redis_version:(\S+)/.exec(info)?.[1]}, hash-max-listpack-value ${(memory as string[])[1]}`;
  }

  async close(): Promise<void> {
    await this.client.quit();
  }
}

function failedCommand(replies: Array<[Error | null, unknown]> | null): void {
  const failure = replies?.find(([error]) => error);
  if (failure) throw failure[0];
}
