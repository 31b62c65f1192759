import { Body, Controller, Headers, Module, Post, Res, type INestApplication, type LoggerService } from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { randomUUID } from 'node:crypto';
import Redis from 'ioredis';
import request from 'supertest';
import { Idempotent, IdempotencyModule, type IdempotencyEvent, type IdempotencyModuleOptions } from '../../lib/index.js';
import { createIdempotencyLogger } from '../../lib/observability/index.js';
import { RedisIdempotencyStore, recommendedRedisOptions } from '../../lib/redis/index.js';
import { RecordingStore, STORE_KEY_PATTERN } from '../fuzz/recording-store.js';
import { UserFromHeaderGuard } from '../support/user-from-header.guard.js';

// The security guarantees of docs/security.md, each checked on the real HTTP stack of
// both platforms: principal isolation, no credentials in stored or replayed answers
// unless allow-listed, hashed keys in events and logs, bounded stored responses.
const SECRET = 'S3cr3t-t0ken-value';

function setHeader(res: any, name: string, value: string): void {
  if (typeof res.header === 'function' && res.raw) res.header(name, value);
  else res.setHeader(name, value);
}

let executions = 0;

@Controller()
class AccountController {
  @Post('transfer')
  @Idempotent()
  transfer(@Body() body: { amount: number }, @Headers('x-user') user?: string) {
    return { transfer: ++executions, amount: body.amount, owner: user ?? null };
  }

  @Post('session')
  @Idempotent()
  session(@Res({ passthrough: true }) res: unknown) {
    setHeader(res, 'Set-Cookie', `session=${SECRET}; HttpOnly`);
    setHeader(res, 'Authorization', `Bearer ${SECRET}`);
    setHeader(res, 'Location', '/sessions/1');
    return { session: ++executions };
  }

  @Post('report')
  @Idempotent({ maxResponseBytes: 2_048 })
  report() {
    return { rows: 'r'.repeat(10_000), n: ++executions };
  }
}

type Platform = 'express' | 'fastify';

interface SecurityApp {
  app: INestApplication;
  store: RecordingStore;
  events: IdempotencyEvent[];
  logs: string[];
}

async function createSecurityApp(platform: Platform, options: IdempotencyModuleOptions = {}): Promise<SecurityApp> {
  const store = new RecordingStore();
  const events: IdempotencyEvent[] = [];
  const logs: string[] = [];
  const capture = (...parts: unknown[]) => void logs.push(parts.map((p) => (typeof p === 'string' ? p : JSON.stringify(p))).join(' '));
  const logger: LoggerService = { log: capture, error: capture, warn: capture, debug: capture, verbose: capture, fatal: capture };
  @Module({
    imports: [
      IdempotencyModule.forRoot({
        store,
        ...options,
        onEvent: [(event) => void events.push(event), createIdempotencyLogger({ logger, levels: { claimed: 'log', completed: 'log' } })],
      }),
    ],
    controllers: [AccountController],
    providers: [{ provide: APP_GUARD, useClass: UserFromHeaderGuard }],
  })
  class SecurityAppModule {}
  const app =
    platform === 'fastify'
      ? await NestFactory.create(SecurityAppModule, new FastifyAdapter(), { logger })
      : await NestFactory.create(SecurityAppModule, { logger });
  await app.init();
  if (platform === 'fastify') await (app.getHttpAdapter().getInstance() as { ready(): Promise<void> }).ready();
  return { app, store, events, logs };
}

describe.each<Platform>(['express', 'fastify'])('security guarantees (%s)', (platform) => {
  let plain: SecurityApp;
  let allowListed: SecurityApp;
  let n = 0;
  const key = (label: string) => `${label}-${platform}-${Date.now()}-${n++}`;

  beforeAll(async () => {
    plain = await createSecurityApp(platform);
    allowListed = await createSecurityApp(platform, { replayHeaders: ['Set-Cookie', 'Authorization'] });
  });
  afterAll(async () => {
    await plain?.app.close();
    await allowListed?.app.close();
  });

  const post = (target: SecurityApp, path: string, idempotencyKey: string, user?: string, body: object = {}) => {
    const req = request(target.app.getHttpServer()).post(path).set('Idempotency-Key', idempotencyKey).send(body);
    return user ? req.set('x-user', user) : req;
  };

  it("never replays one principal's response to another, nor an anonymous caller's", async () => {
    const shared = key('shared');
    const alice = await post(plain, '/transfer', shared, 'alice', { amount: 100 });
    const bob = await post(plain, '/transfer', shared, 'bob', { amount: 100 });
    const anonymous = await post(plain, '/transfer', shared, undefined, { amount: 100 });
    for (const response of [alice, bob, anonymous]) {
      expect(response.status).toBe(201);
      expect(response.headers['idempotent-replayed']).toBeUndefined();
    }
    expect([alice.body.owner, bob.body.owner, anonymous.body.owner]).toEqual(['alice', 'bob', null]);
    expect(new Set([alice.body.transfer, bob.body.transfer, anonymous.body.transfer]).size).toBe(3);
    // Each principal replays only its own.
    const aliceAgain = await post(plain, '/transfer', shared, 'alice', { amount: 100 });
    expect(aliceAgain.headers['idempotent-replayed']).toBe('true');
    expect(aliceAgain.body).toEqual(alice.body);
    // A principal cannot probe another's key either: another body under bob is bob's own new key, not a 422 from alice's.
    const bobOther = await post(plain, '/transfer', key('probe'), 'bob', { amount: 1 });
    expect(bobOther.status).toBe(201);
  });

  it('does not store or replay Set-Cookie or Authorization, nor the request credentials, unless allow-listed', async () => {
    plain.store.reset();
    const k = key('session');
    const send = () => post(plain, '/session', k, 'carol').set('Authorization', `Bearer ${SECRET}`).set('Cookie', `sid=${SECRET}`);
    const first = await send();
    expect(first.status).toBe(201);
    // The first caller gets what the handler set...
    expect(String(first.headers['set-cookie'])).toContain(SECRET);
    const replay = await send();
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.body).toEqual(first.body);
    // ...a replay gets the allow-listed headers only.
    expect(replay.headers['location']).toBe('/sessions/1');
    expect(replay.headers['set-cookie']).toBeUndefined();
    expect(replay.headers['authorization']).toBeUndefined();
    // And the secret never reached the store, from the response or from the request.
    expect(plain.store.results.length).toBeGreaterThan(0);
    for (const stored of plain.store.results) {
      expect(stored).not.toContain(SECRET);
      expect(stored.toLowerCase()).not.toContain('set-cookie');
      expect(stored.toLowerCase()).not.toContain('authorization');
    }
  });

  it('replays Set-Cookie and Authorization when the application allow-lists them (replayHeaders)', async () => {
    const k = key('allowed');
    const first = await post(allowListed, '/session', k, 'dave');
    const replay = await post(allowListed, '/session', k, 'dave');
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(String(replay.headers['set-cookie'])).toContain(SECRET);
    expect(replay.headers['authorization']).toBe(`Bearer ${SECRET}`);
    expect(replay.body).toEqual(first.body);
  });

  it('keeps raw keys out of events, logs and store keys (only the scoped SHA-256 appears)', async () => {
    const raw = key('Very-Recognisable-Raw-Key');
    plain.events.length = 0;
    plain.logs.length = 0;
    plain.store.reset();
    await post(plain, '/transfer', raw, 'erin', { amount: 1 });
    await post(plain, '/transfer', raw, 'erin', { amount: 1 });
    await post(plain, '/transfer', raw, 'erin', { amount: 2 }); // 422: mismatch is logged as a warning
    expect(plain.events.map((e) => e.type)).toEqual(expect.arrayContaining(['claimed', 'completed', 'replayed', 'fingerprint_mismatch']));
    for (const event of plain.events) expect(event.key).toMatch(STORE_KEY_PATTERN);
    expect(JSON.stringify(plain.events)).not.toContain(raw);
    expect(plain.logs.length).toBeGreaterThan(0);
    for (const line of plain.logs) expect(line).not.toContain(raw);
    for (const storeKey of plain.store.keys) expect(storeKey).toMatch(STORE_KEY_PATTERN);
  });

  it('bounds what is stored (maxResponseBytes): an oversized response is sent once, never stored, never replayed', async () => {
    plain.store.reset();
    plain.events.length = 0;
    const k = key('report');
    const first = await post(plain, '/report', k);
    expect(first.status).toBe(201);
    expect(first.body.rows).toHaveLength(10_000);
    for (const stored of plain.store.results) expect(Buffer.byteLength(stored)).toBeLessThanOrEqual(2_048);
    expect(plain.events.some((e) => e.type === 'response_not_storable')).toBe(true);
    const again = await post(plain, '/report', k);
    expect(again.status).toBe(409);
    expect(again.body.code).toBe('IDEMPOTENCY_RESPONSE_NOT_REPLAYABLE');
  });
});

describe('hostile keys against a real Redis store', () => {
  // Keys that would mean something to Redis if they reached it raw: glob patterns, hash
  // tags, Lua and protocol characters. Sent as header values (Node's client refuses CR/LF,
  // which test/fuzz covers over a raw socket).
  const HOSTILE = [
    '*',
    '?',
    '[a-z]*',
    '{tag}',
    '{}',
    '{a}{b}',
    'a}b{',
    '\\',
    "'; FLUSHALL; --",
    // Quotes and commas only as a structured-field string: bare, they would be a malformed or multi-valued header (400).
    '"redis.call(\\"DEL\\", KEYS[1])"',
    ']]..[[',
    '$5',
    '%s%n',
    '..',
    '::',
    'KEYS *',
    '\t tab',
  ];
  const prefix = `test:security:${randomUUID()}:`;
  const redis = new Redis({ host: '127.0.0.1', port: 6379, lazyConnect: true, ...recommendedRedisOptions() });
  let app: INestApplication;

  beforeAll(async () => {
    await redis.connect();
    @Module({
      imports: [IdempotencyModule.forRoot({ store: new RedisIdempotencyStore(redis, { prefix }) })],
      controllers: [AccountController],
    })
    class RedisSecurityModule {}
    app = await NestFactory.create(RedisSecurityModule, { logger: false });
    await app.init();
  });
  afterAll(async () => {
    await app?.close();
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length > 0) await redis.del(...keys);
    redis.disconnect();
  });

  it('stores one hashed Redis key per client key, inside the prefix, whatever the key', async () => {
    for (const key of HOSTILE) {
      const first = await request(app.getHttpServer()).post('/transfer').set('Idempotency-Key', key).send({ amount: 1 });
      expect(first.status).toBe(201);
      const again = await request(app.getHttpServer()).post('/transfer').set('Idempotency-Key', key).send({ amount: 1 });
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.body).toEqual(first.body);
    }
    const stored = await redis.keys(`${prefix}*`);
    expect(stored).toHaveLength(HOSTILE.length);
    const escaped = prefix.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
    for (const redisKey of stored) expect(redisKey).toMatch(new RegExp(`^${escaped}\\{[A-Za-z0-9_-]{43}\\}$`));
    // Nothing leaked outside the prefix either: no raw key exists as a Redis key.
    for (const key of HOSTILE) expect(await redis.exists(key)).toBe(0);
  });
});
