import type { INestApplication } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import request from 'supertest';
import {
  IdempotencyInterceptor,
  MemoryIdempotencyStore,
  type ClaimRequest,
  type ClaimResult,
  type IdempotencyEvent,
  type IdempotencyStore,
} from '../../lib/index.js';
import { createHttpApp, type Effects, type Hooks, type Platform } from './http-app.js';

// NestJS 11's Express adapter forces error bodies to application/json (see http.adapter.ts).
const nestMajor = Number(require('@nestjs/core/package.json').version.split('.')[0]);
const problemType = (platform: Platform) => (platform === 'express' && nestMajor < 12 ? /application\/json/ : /application\/problem\+json/);

let keySeq = 0;
const newKey = () => `key-${process.pid}-${Date.now()}-${++keySeq}`;

/** Polls `condition` until it holds; fails with `what` when `deadlineMs` passes first. */
async function until(what: string, condition: () => boolean | Promise<boolean>, deadlineMs = 10_000): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${deadlineMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** The memory store, telling the test which storage keys were claimed and how often a lease was renewed. */
class ObservedStore extends MemoryIdempotencyStore {
  readonly claims: Array<{ key: string; request: ClaimRequest; claimedAt: number }> = [];
  renewals = 0;

  override async claim(key: string, request: ClaimRequest): Promise<ClaimResult> {
    const result = await super.claim(key, request);
    if (result.claimed) this.claims.push({ key, request, claimedAt: Date.now() });
    return result;
  }

  override async renew(key: string, token: string, leaseTtl: number): Promise<boolean> {
    const renewed = await super.renew(key, token, leaseTtl);
    if (renewed) this.renewals++;
    return renewed;
  }
}

describe.each<Platform>(['express', 'fastify'])('@Idempotent over HTTP (%s)', (platform) => {
  let app: INestApplication;
  let effects: Effects;
  let hooks: Hooks;
  let store: ObservedStore;
  const events: IdempotencyEvent[] = [];
  const server = () => app.getHttpServer();

  beforeAll(async () => {
    store = new ObservedStore();
    ({ app, effects, hooks } = await createHttpApp(platform, { module: { store, onEvent: (e) => events.push(e) } }));
  });
  afterAll(async () => {
    await app?.close();
  });

  it('runs the handler once for 50 concurrent requests with one key (reject mode)', async () => {
    const key = newKey();
    const before = effects.count('charge');
    // The first request is held open until the 49 others have been answered, so the
    // outcome does not depend on how fast a loaded machine delivers them.
    let open!: () => void;
    hooks.gate = new Promise<void>((resolve) => (open = resolve));
    let answered = 0;
    const responses = await Promise.all(
      Array.from({ length: 50 }, () =>
        request(server())
          .post('/charges')
          .set('Idempotency-Key', key)
          .send({ amount: 5 })
          .then((r) => {
            if (++answered === 49) open();
            return r;
          }),
      ),
    );
    hooks.gate = undefined;
    expect(effects.count('charge') - before).toBe(1);
    const ok = responses.filter((r) => r.status === 201);
    const conflicts = responses.filter((r) => r.status === 409);
    expect(ok).toHaveLength(1);
    expect(conflicts).toHaveLength(49);
    for (const r of conflicts) {
      expect(r.headers['retry-after']).toMatch(/^\d+$/);
      expect(r.headers['content-type']).toMatch(problemType(platform));
      expect(r.body).toMatchObject({ status: 409, code: 'IDEMPOTENCY_REQUEST_IN_FLIGHT' });
    }
    // Once finished, a retry replays it.
    const replay = await request(server()).post('/charges').set('Idempotency-Key', key).send({ amount: 5 });
    expect(replay.status).toBe(201);
    expect(replay.body).toEqual(ok[0].body);
    expect(replay.headers['idempotent-replayed']).toBe('true');
  });

  it('runs the handler once and gives 50 identical answers in wait mode', async () => {
    const key = newKey();
    const before = effects.count('chargeWait');
    const responses = await Promise.all(
      Array.from({ length: 50 }, () => request(server()).post('/charges-wait').set('Idempotency-Key', key).send({ amount: 7 })),
    );
    expect(effects.count('chargeWait') - before).toBe(1);
    expect(responses.map((r) => r.status)).toEqual(Array(50).fill(201));
    const bodies = new Set(responses.map((r) => r.text));
    expect(bodies.size).toBe(1);
    expect(responses.filter((r) => r.headers['idempotent-replayed'] === 'true')).toHaveLength(49);
  });

  it.each([
    ['/other', 201],
    ['/text', 201],
    ['/buffer', 201],
    ['/empty', 204],
    ['/accepted', 202],
    ['/null', 201],
    ['/custom-status/42', 209],
  ])('replays %s byte for byte with status %d', async (path, status) => {
    const key = newKey();
    const first = await request(server()).post(path).set('Idempotency-Key', key).buffer(true).parse(rawParser);
    const second = await request(server()).post(path).set('Idempotency-Key', key).buffer(true).parse(rawParser);
    expect(first.status).toBe(status);
    expect(second.status).toBe(status);
    expect(Buffer.compare(first.body as Buffer, second.body as Buffer)).toBe(0);
    for (const header of ['content-type', 'location', 'content-length']) {
      expect(second.headers[header]).toBe(first.headers[header]);
    }
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    expect(second.headers['idempotent-replayed']).toBe('true');
  });

  it('replays a Location set at run time, but never Set-Cookie or unlisted headers', async () => {
    const key = newKey();
    const first = await request(server()).post('/custom-status/7').set('Idempotency-Key', key);
    const second = await request(server()).post('/custom-status/7').set('Idempotency-Key', key);
    expect(first.headers['location']).toMatch(/^\/things\/7\/\d+$/);
    expect(second.headers['location']).toBe(first.headers['location']);
    expect(first.headers['set-cookie']).toBeDefined();
    expect(second.headers['set-cookie']).toBeUndefined();
    expect(second.headers['x-not-replayed']).toBeUndefined();
  });

  it('answers 400 for a missing key with a problem body naming the fix', async () => {
    const r = await request(server()).post('/charges').send({ amount: 1 });
    expect(r.status).toBe(400);
    expect(r.headers['content-type']).toMatch(problemType(platform));
    expect(r.body).toMatchObject({ status: 400, code: 'IDEMPOTENCY_KEY_MISSING' });
    expect(r.body.detail).toMatch(/Idempotency-Key header/);
    expect(r.body.hint).toMatch(/Send a unique key/);
  });

  it.each([
    ['empty', ''],
    ['blank', '   '],
    ['too long', 'k'.repeat(256)],
    ['a control character (tab)', 'abc\tdef'],
    ['a malformed quoted string', '"abc"def"'],
  ])('answers 400 for a key that is %s', async (_label, key) => {
    const r = await request(server()).post('/charges').set('Idempotency-Key', key).send({ amount: 1 });
    expect(r.status).toBe(400);
    expect(r.body.code).toMatch(/IDEMPOTENCY_KEY_(INVALID|MISSING)/);
    expect(r.body.hint).toBeTruthy();
  });

  it('accepts X-Idempotency-Key and a structured-field string as the same key', async () => {
    const key = newKey();
    const a = await request(server()).post('/other').set('X-Idempotency-Key', key);
    const b = await request(server()).post('/other').set('Idempotency-Key', `"${key}"`);
    expect(a.status).toBe(201);
    expect(b.headers['idempotent-replayed']).toBe('true');
    expect(b.body).toEqual(a.body);
  });

  it('answers 422 when a key is reused with a different body', async () => {
    const key = newKey();
    hooks.slowMs = 1;
    const first = await request(server()).post('/charges').set('Idempotency-Key', key).send({ amount: 10 });
    const second = await request(server()).post('/charges').set('Idempotency-Key', key).send({ amount: 11 });
    hooks.slowMs = 100;
    expect(first.status).toBe(201);
    expect(second.status).toBe(422);
    expect(second.body).toMatchObject({ status: 422, code: 'IDEMPOTENCY_FINGERPRINT_MISMATCH' });
    expect(second.body.hint).toMatch(/new key/);
  });

  it('keeps the same key independent across routes and across users', async () => {
    const key = newKey();
    hooks.slowMs = 1;
    const charge = await request(server()).post('/charges').set('Idempotency-Key', key).send({ amount: 1 });
    const other = await request(server()).post('/other').set('Idempotency-Key', key);
    expect(charge.status).toBe(201);
    expect(other.status).toBe(201);
    expect(other.headers['idempotent-replayed']).toBeUndefined();

    const before = effects.count('other');
    const alice = await request(server())
      .post('/other')
      .set('Idempotency-Key', 'shared-key-' + key)
      .set('x-user', 'alice');
    const bob = await request(server())
      .post('/other')
      .set('Idempotency-Key', 'shared-key-' + key)
      .set('x-user', 'bob');
    const aliceAgain = await request(server())
      .post('/other')
      .set('Idempotency-Key', 'shared-key-' + key)
      .set('x-user', 'alice');
    hooks.slowMs = 100;
    expect(effects.count('other') - before).toBe(2);
    expect(bob.body).not.toEqual(alice.body);
    expect(bob.headers['idempotent-replayed']).toBeUndefined();
    expect(aliceAgain.body).toEqual(alice.body);
    expect(aliceAgain.headers['idempotent-replayed']).toBe('true');
  });

  it('releases the key when the handler throws, so the retry runs again', async () => {
    const key = newKey();
    const before = effects.count('fails');
    hooks.failNext.value = true;
    const first = await request(server()).post('/fails').set('Idempotency-Key', key);
    expect(first.status).toBe(500);
    hooks.failNext.value = false;
    const retry = await request(server()).post('/fails').set('Idempotency-Key', key);
    expect(retry.status).toBe(201);
    expect(effects.count('fails') - before).toBe(2);
    const replay = await request(server()).post('/fails').set('Idempotency-Key', key);
    expect(replay.body).toEqual(retry.body);
    expect(effects.count('fails') - before).toBe(2);
  });

  it('replays a thrown error that cacheErrors selects', async () => {
    const key = newKey();
    const before = effects.count('failsCached');
    const first = await request(server()).post('/fails-cached').set('Idempotency-Key', key);
    const second = await request(server()).post('/fails-cached').set('Idempotency-Key', key);
    expect(first.status).toBe(402);
    expect(second.status).toBe(402);
    expect(second.body).toEqual(first.body);
    expect(second.headers['idempotent-replayed']).toBe('true');
    expect(effects.count('failsCached') - before).toBe(1);
  });

  it('never replays a response it could not store: too large or a stream', async () => {
    for (const path of ['/big', '/stream']) {
      const key = newKey();
      const name = path.slice(1);
      const before = effects.count(name);
      const first = await request(server()).post(path).set('Idempotency-Key', key);
      expect(first.status).toBe(201);
      const second = await request(server()).post(path).set('Idempotency-Key', key);
      expect(second.status).toBe(409);
      expect(second.body).toMatchObject({ code: 'IDEMPOTENCY_RESPONSE_NOT_REPLAYABLE' });
      expect(second.headers['retry-after']).toBeUndefined();
      expect(effects.count(name) - before).toBe(1);
    }
    expect(events.some((e) => e.type === 'response_not_storable' && /maxResponseBytes/.test(e.reason ?? ''))).toBe(true);
    expect(events.some((e) => e.type === 'response_not_storable' && /stream/i.test(e.reason ?? ''))).toBe(true);
  });

  it('runs without protection when the key is optional and absent, and leaves undecorated handlers alone', async () => {
    const before = effects.count('optional');
    await request(server()).post('/optional').expect(201);
    await request(server()).post('/optional').expect(201);
    expect(effects.count('optional') - before).toBe(2);
    await request(server()).post('/plain').expect(201);
    await request(server()).post('/plain').set('Idempotency-Key', '').expect(201);
  });

  it('takes the key from the body through the key option', async () => {
    const eventId = newKey();
    const before = effects.count('webhook');
    const a = await request(server()).post('/webhook').send({ eventId, type: 'refund' });
    const b = await request(server()).post('/webhook').send({ eventId, type: 'refund' });
    expect(a.status).toBe(201);
    expect(b.headers['idempotent-replayed']).toBe('true');
    expect(effects.count('webhook') - before).toBe(1);
    const missing = await request(server()).post('/webhook').send({ type: 'refund' });
    expect(missing.status).toBe(400);
    const control = await request(server()).post('/webhook').send({ eventId: 'evt\u0000\r\n1' });
    expect(control.status).toBe(400);
    expect(control.body.code).toBe('IDEMPOTENCY_KEY_INVALID');
  });

  it('renews the lease: a handler still running a whole leaseTtl past its first lease is not run twice', async () => {
    // An app of its own, so that every handler gets a short lease; the handler is held on
    // a gate, so the retry always arrives while it still runs, however slow the machine.
    // The lease is long enough that only an event-loop stall of 2/3 of it (the renewal
    // runs every third) could lose it.
    const leaseTtl = 1_000;
    const leased = new ObservedStore();
    const own = await createHttpApp(platform, { module: { store: leased, leaseTtl } });
    let open!: () => void;
    own.hooks.gate = new Promise<void>((resolve) => (open = resolve));
    try {
      const key = newKey();
      const first = request(own.app.getHttpServer()).post('/charges').set('Idempotency-Key', key).send({ amount: 3 });
      const firstAnswer = first.then((r) => r); // sends it now
      await until('the first request to reach the handler', () => own.effects.count('charge') === 1);
      const [claim] = leased.claims;
      const firstLeaseEnd = claim.claimedAt + leaseTtl;
      // Without renewal the key would be claimable from firstLeaseEnd on.
      await until('a lease period past the first lease', () => Date.now() > firstLeaseEnd + leaseTtl);
      const record = await leased.get(claim.key);
      expect(record).toMatchObject({ status: 'in_progress', leaseToken: claim.request.token });
      expect(leased.renewals).toBeGreaterThanOrEqual(2);
      const retry = await request(own.app.getHttpServer()).post('/charges').set('Idempotency-Key', key).send({ amount: 3 });
      expect(retry.status).toBe(409);
      expect(retry.body.code).toBe('IDEMPOTENCY_REQUEST_IN_FLIGHT');
      open();
      expect((await firstAnswer).status).toBe(201);
      const replay = await request(own.app.getHttpServer()).post('/charges').set('Idempotency-Key', key).send({ amount: 3 });
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(own.effects.count('charge')).toBe(1);
    } finally {
      open();
      await own.app.close();
    }
  });

  it('lets a retry take over a claim whose owner vanished once leaseTtl has passed', async () => {
    const key = newKey();
    // The storage key is learnt from a real request rather than computed here, so the
    // test does not depend on how scopes are derived.
    const probe = await request(server()).post('/other').set('Idempotency-Key', key);
    expect(probe.status).toBe(201);
    const { key: storageKey, request: probeClaim } = store.claims[store.claims.length - 1];
    // A worker that claimed the key and died: it never completes nor renews. While its
    // lease lasts (a minute: no request here can outlive it), a retry is refused.
    await store.delete(storageKey);
    const dead = { token: 'dead-worker', fingerprint: probeClaim.fingerprint };
    expect((await store.claim(storageKey, { ...dead, leaseTtl: 60_000 })).claimed).toBe(true);
    const before = effects.count('other');
    const early = await request(server()).post('/other').set('Idempotency-Key', key);
    expect(early.status).toBe(409);
    expect(effects.count('other') - before).toBe(0);
    // Time passes for the dead worker: its record is swapped for one whose lease ends in
    // 50 ms, and nothing reads it (a read would drop it) until that moment is over, so the
    // retry meets an expired lease of another token, as after a crash.
    await store.delete(storageKey);
    const expiring = await store.claim(storageKey, { ...dead, leaseTtl: 50 });
    if (!expiring.claimed) throw new Error('the dead worker could not claim the key again');
    const { leaseExpiresAt } = expiring.record;
    await until('the dead worker lease to run out', () => Date.now() > leaseExpiresAt);
    const late = await request(server()).post('/other').set('Idempotency-Key', key);
    expect(late.status).toBe(201);
    expect(late.headers['idempotent-replayed']).toBeUndefined();
    expect(effects.count('other') - before).toBe(1);
  });
});

describe.each<Platform>(['express', 'fastify'])('store failures over HTTP (%s)', (platform) => {
  const brokenStore: IdempotencyStore = {
    claim: () => Promise.reject(new Error('connection refused')),
    complete: () => Promise.reject(new Error('connection refused')),
    release: () => Promise.reject(new Error('connection refused')),
    renew: () => Promise.reject(new Error('connection refused')),
    get: () => Promise.reject(new Error('connection refused')),
    delete: () => Promise.reject(new Error('connection refused')),
  };

  it('answers 503 when fail-closed', async () => {
    const { app, effects } = await createHttpApp(platform, { module: { store: brokenStore }, slowMs: 1 });
    try {
      const r = await request(app.getHttpServer()).post('/charges').set('Idempotency-Key', 'k1').send({ amount: 1 });
      expect(r.status).toBe(503);
      expect(r.body).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE' });
      // The cause stays in the server log: a client never reads store hosts or driver messages.
      expect(r.body.detail).toBe('The idempotency store is unavailable.');
      expect(JSON.stringify(r.body)).not.toMatch(/connection refused/);
      expect(effects.count('charge')).toBe(0);
    } finally {
      await app.close();
    }
  });

  it('runs the handler and reports the event when fail-open', async () => {
    const events: IdempotencyEvent[] = [];
    const { app, effects } = await createHttpApp(platform, {
      module: { store: brokenStore, onStoreError: 'fail-open', onEvent: (e) => events.push(e) },
      slowMs: 1,
    });
    try {
      const r = await request(app.getHttpServer()).post('/charges').set('Idempotency-Key', 'k1').send({ amount: 1 });
      expect(r.status).toBe(201);
      expect(effects.count('charge')).toBe(1);
      expect(events.find((e) => e.type === 'store_error')).toMatchObject({ failOpen: true, handler: 'PaymentsController.charge' });
    } finally {
      await app.close();
    }
  });
});

describe('global registration (express)', () => {
  it('processes a request once when IdempotencyInterceptor is also global', async () => {
    const events: IdempotencyEvent[] = [];
    const { app, effects } = await createHttpApp('express', {
      module: { onEvent: (e) => events.push(e) },
      extraProviders: [{ provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor }],
      slowMs: 1,
    });
    try {
      const key = newKey();
      const a = await request(app.getHttpServer()).post('/other').set('Idempotency-Key', key);
      const b = await request(app.getHttpServer()).post('/other').set('Idempotency-Key', key);
      expect(a.status).toBe(201);
      expect(b.headers['idempotent-replayed']).toBe('true');
      expect(effects.count('other')).toBe(1);
      expect(events.filter((e) => e.type === 'claimed')).toHaveLength(1);
      expect(events.filter((e) => e.type === 'replayed')).toHaveLength(1);
      await request(app.getHttpServer()).post('/plain').expect(201);
    } finally {
      await app.close();
    }
  });
});

function rawParser(res: any, callback: (err: Error | null, body: Buffer) => void) {
  const chunks: Buffer[] = [];
  res.on('data', (c: Buffer) => chunks.push(c));
  res.on('end', () => callback(null, Buffer.concat(chunks)));
}
