import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import { IdempotencyConfigurationError, IdempotencyErrorCode } from '../../lib/core/errors.js';
import { RedisOneTimeTokenStore, recommendedRedisOptions } from '../../lib/redis/index.js';
import {
  MemoryOneTimeTokenStore,
  OneTimeTokenInvalidError,
  OneTimeTokenMissingError,
  OneTimeTokenService,
  OneTimeTokenUsedError,
  type OneTimeTokenStore,
} from '../../lib/tokens/index.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// Redis: the shared server on 6379, a unique prefix per run, and several connections
// so that concurrent consumptions really race on the server.
const redisClients: Redis[] = [];
async function redisClient(): Promise<Redis> {
  const client = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
  redisClients.push(client);
  await client.connect();
  return client;
}
afterAll(() => {
  for (const client of redisClients) client.disconnect();
});

const backends: [string, () => Promise<OneTimeTokenStore[]>][] = [
  ['MemoryOneTimeTokenStore', async () => [new MemoryOneTimeTokenStore()]],
  [
    'RedisOneTimeTokenStore',
    async () => {
      const prefix = `test:ott:${randomUUID()}:`;
      return Promise.all(Array.from({ length: 5 }, async () => new RedisOneTimeTokenStore(await redisClient(), { prefix })));
    },
  ],
];

describe.each(backends)('OneTimeTokenService on %s', (_name, makeStores) => {
  let services: OneTimeTokenService[];
  let service: OneTimeTokenService;

  beforeAll(async () => {
    services = (await makeStores()).map((store) => new OneTimeTokenService({ store }));
    service = services[0];
  });

  it('accepts exactly one of 50 concurrent consumptions of one token', async () => {
    const token = await service.issue('checkout:u1');
    const results = await Promise.all(Array.from({ length: 50 }, (_, i) => services[i % services.length].consume('checkout:u1', token)));
    expect(results.filter(Boolean)).toHaveLength(1);
    expect(await service.consume('checkout:u1', token)).toBe(false);
  });

  it('tells a reused token (409) from an unknown one (422)', async () => {
    const token = await service.issue('checkout:u1');
    await expect(service.consumeOrThrow('checkout:u1', token)).resolves.toBeUndefined();
    const reused = await service.consumeOrThrow('checkout:u1', token).catch((error: unknown) => error);
    expect(reused).toBeInstanceOf(OneTimeTokenUsedError);
    expect(reused).toMatchObject({ status: 409, code: IdempotencyErrorCode.TokenUsed });
    const unknown = await service.consumeOrThrow('checkout:u1', 'never-issued').catch((error: unknown) => error);
    expect(unknown).toBeInstanceOf(OneTimeTokenInvalidError);
    expect(unknown).toMatchObject({ status: 422, code: IdempotencyErrorCode.TokenInvalid });
    expect(await service.redeem('checkout:u1', token)).toBe('already_used');
    expect(await service.redeem('checkout:u1', 'never-issued')).toBe('unknown');
  });

  it('binds a token to its scope', async () => {
    const token = await service.issue('checkout:u1');
    expect(await service.redeem('checkout:u2', token)).toBe('unknown');
    expect(await service.consume('checkout:u1', token)).toBe(true);
  });

  it('treats malformed tokens as unknown', async () => {
    for (const token of [undefined, null, 42, '', 'x'.repeat(256), { token: 'x' }]) {
      expect(await service.redeem('checkout:u1', token)).toBe('unknown');
    }
  });

  it('issues distinct URL-safe tokens', async () => {
    const tokens = await Promise.all(Array.from({ length: 100 }, () => service.issue()));
    expect(new Set(tokens).size).toBe(100);
    for (const token of tokens) expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(await service.consume('default', tokens[0])).toBe(true);
  });

  it('forgets a token after its ttl, unused or used', async () => {
    const unused = await service.issue('s', { ttl: 150 });
    const used = await service.issue('s', { ttl: 150 });
    expect(await service.consume('s', used)).toBe(true);
    await sleep(300);
    expect(await service.redeem('s', unused)).toBe('unknown');
    expect(await service.redeem('s', used)).toBe('unknown');
  });

  it('revokes a token before use', async () => {
    const token = await service.issue('s');
    expect(await service.revoke('s', token)).toBe(true);
    expect(await service.redeem('s', token)).toBe('unknown');
    expect(await service.revoke('s', token)).toBe(false);
  });
});

describe('MemoryOneTimeTokenStore bounds', () => {
  it('holds at most maxEntries tokens, forgetting the oldest first', async () => {
    const store = new MemoryOneTimeTokenStore({ maxEntries: 100 });
    const service = new OneTimeTokenService({ store });
    const tokens: string[] = [];
    for (let i = 0; i < 1_000; i++) {
      tokens.push(await service.issue('s'));
      expect(store.size).toBeLessThanOrEqual(100);
    }
    expect(await service.redeem('s', tokens[0])).toBe('unknown');
    expect(await service.redeem('s', tokens[999])).toBe('consumed');
  });

  it('rejects nonsensical options with a hint', () => {
    expect(() => new MemoryOneTimeTokenStore({ maxEntries: 0 })).toThrow(IdempotencyConfigurationError);
    expect(() => new MemoryOneTimeTokenStore({ maxEntries: 0 })).toThrow(
      /MemoryOneTimeTokenStore: maxEntries must be a whole number above 0/,
    );
    expect(() => new OneTimeTokenService({ ttl: -1 })).toThrow(IdempotencyConfigurationError);
    expect(() => new OneTimeTokenService({ ttl: -1 })).toThrow(/OneTimeTokenService: ttl must be a whole number of milliseconds above 0/);
  });

  it('refuses a fractional ttl and a scope that is not a string, as configuration errors', async () => {
    const service = new OneTimeTokenService();
    await expect(service.issue('s', { ttl: 1.5 })).rejects.toThrow(
      /OneTimeTokenService\.issue: ttl must be a whole number of milliseconds/,
    );
    await expect(service.consume(42 as never, 'token')).rejects.toThrow(IdempotencyConfigurationError);
    await expect(service.consume(42 as never, 'token')).rejects.toThrow(/scope must be a string, got number/);
  });
});

describe('one-time token errors', () => {
  it('carry their own title and code', () => {
    expect(new OneTimeTokenMissingError('the x-token header')).toMatchObject({
      title: 'One-time token missing',
      code: IdempotencyErrorCode.TokenMissing,
    });
    expect(new OneTimeTokenUsedError()).toMatchObject({ title: 'One-time token already used', code: IdempotencyErrorCode.TokenUsed });
    expect(new OneTimeTokenInvalidError()).toMatchObject({ title: 'One-time token invalid', code: IdempotencyErrorCode.TokenInvalid });
  });
});
