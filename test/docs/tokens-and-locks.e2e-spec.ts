import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import { RedisLockProvider } from '../../lib/redis/index.js';
import { buildPageApps, cleanUpDocApps, requestJson, run, startHttpApp, stopApp, type RunningApp } from './support/doc-app.js';

/**
 * docs/tokens-and-locks.md as a user meets it (test/docs/support/doc-app.ts): the page's
 * shop, built by `tsc` from the page's own text with getting started's package.json and
 * tsconfig.json, started with `node dist/main.js` and run on the real Redis. One-time
 * tokens are accepted once, a held lock keeps a second holder out, and the process exits
 * on SIGTERM.
 */
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';
/** The page's REDIS_PREFIX, unique per run: parallel runs never share a stock, a lock or a token. */
const prefix = `docs-tokens-locks-${process.pid}-${randomUUID().slice(0, 8)}`;

describe('docs/tokens-and-locks.md, built and run as a user would', () => {
  let dir: string;
  let base: string;
  let app: RunningApp;
  let redis: Redis;

  beforeAll(async () => {
    dir = (await buildPageApps('tokens-and-locks', ['default'])).get('default')!;
    redis = new Redis(REDIS_URL);
    ({ base, app } = await startHttpApp(dir, { REDIS_URL, REDIS_PREFIX: prefix }));
  }, 300_000);

  afterAll(async () => {
    cleanUpDocApps();
    if (redis) {
      const keys = await redis.keys(`${prefix}:*`);
      if (keys.length > 0) await redis.del(...keys);
      redis.disconnect();
    }
  });

  async function tokenFor(userId: string): Promise<string> {
    const { status, body } = await requestJson(base, 'GET', '/checkout/token', { headers: { 'x-user-id': userId } });
    expect(status).toBe(200);
    return (body as { token: string }).token;
  }

  const pay = (userId: string, token: string | undefined, amount = 500) =>
    requestJson(base, 'POST', '/checkout', {
      body: { amount },
      headers: { 'x-user-id': userId, ...(token === undefined ? {} : { 'one-time-token': token }) },
    });

  it("the page's checkout commands, verbatim: 201, then 409 IDEMPOTENCY_TOKEN_USED", async () => {
    const script = readFileSync(join(dir, 'checkout.sh'), 'utf8').replaceAll('localhost:3000', base);
    const output = await run('bash', ['-c', script], dir);
    const statuses = [...output.matchAll(/HTTP\/[\d.]+ (\d+)/gm)].map(([, status]) => status);
    expect(statuses).toEqual(['201', '409']);
    expect(output).toContain('"code":"IDEMPOTENCY_TOKEN_USED"');
  });

  it('a token is accepted once, even by concurrent submissions; another user’s token is unknown; no token is a 400', async () => {
    const user = `u-${randomUUID()}`;
    const token = await tokenFor(user);
    expect(await pay(user, token)).toMatchObject({ status: 201, body: { paid: 500 } });
    const again = await pay(user, token);
    expect(again.status).toBe(409);
    expect(again.body.code).toBe('IDEMPOTENCY_TOKEN_USED');

    // A double click: ten submissions of one fresh token at once, one accepted.
    const fresh = await tokenFor(user);
    const answers = await Promise.all(Array.from({ length: 10 }, () => pay(user, fresh)));
    expect(answers.map((answer) => answer.status).sort()).toEqual([201, ...Array(9).fill(409)]);

    // The scope binds the token to its user.
    const other = await pay(`u-${randomUUID()}`, await tokenFor(user));
    expect(other.status).toBe(422);
    expect(other.body.code).toBe('IDEMPOTENCY_TOKEN_INVALID');
    const missing = await pay(user, undefined);
    expect(missing.status).toBe(400);
    expect(missing.body.code).toBe('IDEMPOTENCY_TOKEN_MISSING');
    // The tokens live under the page's prefix.
    expect((await redis.keys(`${prefix}:one-time-token:*`)).length).toBeGreaterThanOrEqual(3);
  });

  it('a held lock keeps a second holder out; concurrent buyers sell exactly the stock', async () => {
    const sku = `sku-${randomUUID()}`;
    const stockKey = `${prefix}:stock:${sku}`;
    await redis.set(stockKey, '5');
    const buy = () => requestJson(base, 'POST', `/inventory/${sku}/buy`);

    // Another holder (another instance, here this test) holds the SKU's lock under the page's lock prefix.
    const locks = new RedisLockProvider(redis, { prefix: `${prefix}:lock:` });
    const held = await locks.acquire(`inventory:${sku}`, { ttl: 30_000 });
    expect(held).toBeDefined();
    const started = Date.now();
    const refused = await buy();
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ code: 'IDEMPOTENCY_LOCK_NOT_ACQUIRED' });
    // It waited the page's waitTimeout (2 s) for the lock, then gave up without touching the stock.
    expect(Date.now() - started).toBeGreaterThanOrEqual(2_000);
    expect(await redis.get(stockKey)).toBe('5');
    expect(await held!.release()).toBe(true);

    const bought = await buy();
    expect(bought).toMatchObject({ status: 201, body: { bought: true } });
    expect(await redis.get(stockKey)).toBe('4');

    // Twelve buyers at once for four left: read, check, write never interleave, so exactly four buy.
    const answers = await Promise.all(Array.from({ length: 12 }, buy));
    expect(answers.map((answer) => answer.status)).toEqual(Array(12).fill(201));
    expect(answers.filter((answer) => answer.body.bought === true)).toHaveLength(4);
    expect(await redis.get(stockKey)).toBe('0');
    // Every lock was released.
    expect(await redis.exists(`${prefix}:lock:inventory:${sku}`)).toBe(0);
  });

  it('exits on SIGTERM: the page’s RedisModule quits the client', async () => {
    await stopApp(app);
  });
});
