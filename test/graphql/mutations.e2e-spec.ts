import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { IdempotencyInterceptor, MemoryIdempotencyStore, type IdempotencyStore } from '../../lib/index.js';
import type { CompleteRequest } from '../../lib/core/store.js';
import { captureLogger } from '../support/capture-logger.js';
import { createGraphqlApp, Effects, gate, gql, until, type Hooks } from './graphql-app.js';

/**
 * `@Idempotent()` on `@Mutation()` resolvers of a code-first schema served by Apollo
 * Server through Nest's Apollo driver, over real HTTP.
 */
const REFUND = 'mutation Refund($orderId: String!, $amount: Int!) { refund(orderId: $orderId, amount: $amount) { id amount run } }';

describe('GraphQL mutations with @Idempotent() (Apollo over HTTP)', () => {
  const effects = new Effects();
  const hooks: Hooks = {};
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    ({ app, url } = await createGraphqlApp(effects, hooks));
  });
  afterAll(async () => {
    await app?.close();
  });
  afterEach(() => {
    hooks.gate = undefined;
    hooks.started = undefined;
  });

  it('runs a mutation once per key and replays its stored value as the field value', async () => {
    const orderId = randomUUID();
    const key = randomUUID();
    const first = await gql(url, REFUND, { key, variables: { orderId, amount: 5 } });
    expect(first.errors).toBeUndefined();
    expect(first.data).toEqual({ refund: { id: `rf_${orderId}_1`, amount: 5, run: 1 } });
    const again = await gql(url, REFUND, { key, variables: { orderId, amount: 5 } });
    expect(again).toEqual(first);
    expect(effects.count(`refund:${orderId}`)).toBe(1);
    // A new key is a new refund.
    const other = await gql(url, REFUND, { key: randomUUID(), variables: { orderId, amount: 5 } });
    expect(other.data?.refund.run).toBe(2);
  });

  it('replays DateTime fields (Date objects, also in lists) as the first answer had them', async () => {
    const orderId = randomUUID();
    const key = randomUUID();
    const query = `mutation { refund(orderId: "${orderId}", amount: 2) { id createdAt steps } }`;
    const first = await gql(url, query, { key });
    expect(first.errors).toBeUndefined();
    expect(first.data!.refund).toEqual({
      id: `rf_${orderId}_1`,
      createdAt: '2026-01-01T12:30:00.000Z',
      steps: ['2026-01-01T12:30:00.000Z', '2026-01-01T12:30:01.000Z'],
    });
    expect(await gql(url, query, { key })).toEqual(first);
    expect(effects.count(`refund:${orderId}`)).toBe(1);
  });

  it('fingerprints the arguments whether written inline or as variables, and refuses a key reused with other arguments (422 equivalent)', async () => {
    const orderId = randomUUID();
    const key = randomUUID();
    const inline = await gql(url, `mutation { refund(orderId: "${orderId}", amount: 7) { id amount run } }`, { key });
    const variables = await gql(url, REFUND, { key, variables: { orderId, amount: 7 } });
    expect(variables.data).toEqual(inline.data);
    const changed = await gql(url, REFUND, { key, variables: { orderId, amount: 8 } });
    expect(changed.data).toBeNull();
    expect(changed.errors).toHaveLength(1);
    expect(changed.errors![0]).toMatchObject({
      path: ['refund'],
      extensions: { code: 'IDEMPOTENCY_FINGERPRINT_MISMATCH', status: 422 },
    });
    expect(changed.errors![0].extensions!.retryAfter).toBeUndefined();
    expect(effects.count(`refund:${orderId}`)).toBe(1);
  });

  it('reads input objects as arguments (null-prototype objects from graphql-js) and replays them', async () => {
    const orderId = randomUUID();
    const key = randomUUID();
    const query = 'mutation R($input: RefundInput!) { refundInput(input: $input) { id amount run } }';
    const first = await gql(url, query, { key, variables: { input: { orderId, amount: 3 } } });
    const reordered = await gql(url, query, { key, variables: { input: { amount: 3, orderId } } });
    expect(first.errors).toBeUndefined();
    expect(reordered).toEqual(first);
    const changed = await gql(url, query, { key, variables: { input: { orderId, amount: 4 } } });
    expect(changed.errors![0].extensions!.code).toBe('IDEMPOTENCY_FINGERPRINT_MISMATCH');
    expect(effects.count(`refundInput:${orderId}`)).toBe(1);
  });

  it('refuses a missing key and malformed keys (400 equivalents) without running the mutation', async () => {
    const orderId = randomUUID();
    const missing = await gql(url, REFUND, { variables: { orderId, amount: 1 } });
    expect(missing.status).toBe(200);
    expect(missing.data).toBeNull();
    expect(missing.errors![0]).toMatchObject({
      path: ['refund'],
      extensions: { code: 'IDEMPOTENCY_KEY_MISSING', status: 400 },
    });
    expect(missing.errors![0].message).toMatch(/Idempotency-Key header/);

    const two = await gql(url, REFUND, {
      headers: { 'idempotency-key': 'a', 'x-idempotency-key': 'b' },
      variables: { orderId, amount: 1 },
    });
    expect(two.errors![0].extensions).toMatchObject({ code: 'IDEMPOTENCY_KEY_INVALID', status: 400 });
    const long = await gql(url, REFUND, { key: 'k'.repeat(256), variables: { orderId, amount: 1 } });
    expect(long.errors![0].extensions).toMatchObject({ code: 'IDEMPOTENCY_KEY_INVALID', status: 400 });
    const badQuoting = await gql(url, REFUND, { key: '"unterminated', variables: { orderId, amount: 1 } });
    expect(badQuoting.errors![0].extensions!.code).toBe('IDEMPOTENCY_KEY_INVALID');
    expect(effects.count(`refund:${orderId}`)).toBe(0);

    // X-Idempotency-Key alone works, and equals the same key in Idempotency-Key.
    const x = await gql(url, REFUND, { headers: { 'x-idempotency-key': `"${orderId}"` }, variables: { orderId, amount: 1 } });
    const plain = await gql(url, REFUND, { key: orderId, variables: { orderId, amount: 1 } });
    expect(plain).toEqual(x);
    expect(effects.count(`refund:${orderId}`)).toBe(1);
  });

  it('gives each mutation of one operation its own record under one key, aliases apart, and replays them all on retry', async () => {
    const orderId = randomUUID();
    const key = randomUUID();
    const operation = `mutation {
      a: refund(orderId: "${orderId}", amount: 1) { id run }
      b: refund(orderId: "${orderId}", amount: 1) { id run }
      ping
    }`;
    const first = await gql(url, operation, { key });
    expect(first.errors).toBeUndefined();
    expect(first.data!.a.run).not.toBe(first.data!.b.run);
    expect(effects.count(`refund:${orderId}`)).toBe(2);
    const retried = await gql(url, operation, { key });
    expect(retried).toEqual(first);
    expect(effects.count(`refund:${orderId}`)).toBe(2);

    // The unaliased field is another record again (its response path is `refund`).
    const unaliased = await gql(url, `mutation { refund(orderId: "${orderId}", amount: 1) { id run } }`, { key });
    expect(unaliased.data!.refund.run).toBe(3);
    // One alias can change arguments without touching the other's record: a mismatch for it alone.
    const partly = await gql(
      url,
      `mutation { a: refund(orderId: "${orderId}", amount: 1) { id run } b: refund(orderId: "${orderId}", amount: 2) { id run } }`,
      { key },
    );
    expect(partly.data).toBeNull(); // refund is non-null: the error nulls the whole data object
    expect(partly.errors).toHaveLength(1);
    expect(partly.errors![0]).toMatchObject({ path: ['b'], extensions: { code: 'IDEMPOTENCY_FINGERPRINT_MISMATCH' } });
    expect(effects.count(`refund:${orderId}`)).toBe(3);
  });

  it('runs a resolver without parameter decorators (raw resolver arguments) under the protocol', async () => {
    const key = randomUUID();
    const before = effects.count('ping');
    const first = await gql(url, 'mutation { ping }', { key });
    const again = await gql(url, 'mutation { ping }', { key });
    expect(first.data).toEqual({ ping: before + 1 });
    expect(again.data).toEqual(first.data);
    expect(effects.count('ping')).toBe(before + 1);
  });

  it('scopes keys by request.user like HTTP, and fails closed on a user without an identity', async () => {
    const orderId = randomUUID();
    const key = randomUUID();
    const alice = await gql(url, REFUND, { key, headers: { 'x-user': 'alice' }, variables: { orderId, amount: 2 } });
    const bob = await gql(url, REFUND, { key, headers: { 'x-user': 'bob' }, variables: { orderId, amount: 2 } });
    const aliceAgain = await gql(url, REFUND, { key, headers: { 'x-user': 'alice' }, variables: { orderId, amount: 2 } });
    expect(alice.data!.refund.run).toBe(1);
    expect(bob.data!.refund.run).toBe(2);
    expect(aliceAgain).toEqual(alice);

    const nobody = await gql(url, REFUND, { key: randomUUID(), headers: { 'x-user': '!' }, variables: { orderId, amount: 2 } });
    expect(nobody.errors![0].extensions).toMatchObject({ code: 'IDEMPOTENCY_CONFIGURATION_ERROR', status: 500 });
    expect(effects.count(`refund:${orderId}`)).toBe(2);
  });

  it('answers a duplicate of a running mutation with IDEMPOTENCY_REQUEST_IN_FLIGHT and retryAfter in seconds', async () => {
    const orderId = randomUUID();
    const key = randomUUID();
    const held = gate();
    let started = 0;
    hooks.gate = held.promise;
    hooks.started = () => started++;
    const first = gql(url, REFUND, { key, variables: { orderId, amount: 9 } });
    await until(() => started === 1, 'the first mutation to start');
    const duplicate = await gql(url, REFUND, { key, variables: { orderId, amount: 9 } });
    expect(duplicate.data).toBeNull();
    expect(duplicate.errors![0].extensions).toMatchObject({ code: 'IDEMPOTENCY_REQUEST_IN_FLIGHT', status: 409 });
    const retryAfter = duplicate.errors![0].extensions!.retryAfter;
    expect(Number.isInteger(retryAfter)).toBe(true);
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(30); // the default lease, 30 s, in seconds (not ms)
    held.open();
    expect((await first).data!.refund.run).toBe(1);
    expect(effects.count(`refund:${orderId}`)).toBe(1);
  });

  it('runs the effect once for 40 duplicates in flight at once; the others are refused or replay the same value', async () => {
    const orderId = randomUUID();
    const key = randomUUID();
    const held = gate();
    hooks.gate = held.promise;
    hooks.started = () => undefined;
    const all = Array.from({ length: 40 }, () => gql(url, REFUND, { key, variables: { orderId, amount: 4 } }));
    await until(() => effects.count(`refund:${orderId}`) === 1, 'one of them to start');
    held.open();
    const responses = await Promise.all(all);
    expect(effects.count(`refund:${orderId}`)).toBe(1);
    const served = responses.filter((r) => r.data);
    expect(served.length).toBeGreaterThanOrEqual(1);
    for (const r of served) expect(r.data).toEqual({ refund: { id: `rf_${orderId}_1`, amount: 4, run: 1 } });
    for (const r of responses.filter((r) => !r.data)) expect(r.errors![0].extensions!.code).toBe('IDEMPOTENCY_REQUEST_IN_FLIGHT');
    const replay = await gql(url, REFUND, { key, variables: { orderId, amount: 4 } });
    expect(replay.data).toEqual(served[0].data);
  });

  it("with inFlight: 'wait', 30 duplicates in flight all get the one run's value", async () => {
    const orderId = randomUUID();
    const key = randomUUID();
    const held = gate();
    hooks.gate = held.promise;
    hooks.started = () => undefined;
    const query = 'mutation R($input: RefundInput!) { refundInput(input: $input) { id amount run } }';
    const all = Array.from({ length: 30 }, () => gql(url, query, { key, variables: { input: { orderId, amount: 6 } } }));
    await until(() => effects.count(`refundInput:${orderId}`) === 1, 'one of them to start');
    held.open();
    const responses = await Promise.all(all);
    expect(effects.count(`refundInput:${orderId}`)).toBe(1);
    for (const r of responses) expect(r).toEqual({ status: 200, data: { refundInput: { id: `rf_${orderId}_1`, amount: 6, run: 1 } } });
  });

  it('takes the key from the arguments with the key option, no header needed', async () => {
    const paymentId = randomUUID();
    const query = `mutation { capture(paymentId: "${paymentId}") }`;
    const first = await gql(url, query);
    expect(first.data).toEqual({ capture: 1 });
    expect(await gql(url, query, { key: 'a header is ignored' })).toEqual(first);
    expect(effects.count(`capture:${paymentId}`)).toBe(1);
  });

  it('releases the key when the resolver throws, so a retry runs it again', async () => {
    const orderId = randomUUID();
    const key = randomUUID();
    const query = `mutation { flaky(orderId: "${orderId}") }`;
    const failed = await gql(url, query, { key });
    expect(failed.errors![0].message).toBe('first attempt fails');
    const retried = await gql(url, query, { key });
    expect(retried.data).toEqual({ flaky: 2 });
    expect(await gql(url, query, { key })).toEqual(retried);
  });

  it('replays a cached HttpException as the same GraphQL error (cacheErrors)', async () => {
    const key = randomUUID();
    const query = 'mutation { decline(orderId: "o-declined") }';
    const first = await gql(url, query, { key });
    const again = await gql(url, query, { key });
    expect(first.errors![0].message).toMatch(/^order o-declined declined \(\d+\)$/);
    expect(again).toEqual(first);
  });
});

describe('GraphQL mutations: store outage, logs and the interceptor entry point', () => {
  let app: INestApplication | undefined;
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });

  it('answers IDEMPOTENCY_STORE_UNAVAILABLE (503 equivalent) without details of the cause, and runs nothing', async () => {
    const effects = new Effects();
    const down = new Error('connect ECONNREFUSED 10.0.0.7:6379');
    const broken = new MemoryIdempotencyStore();
    const store: IdempotencyStore = Object.assign(broken, { claim: () => Promise.reject(down) });
    let url: string;
    ({ app, url } = await createGraphqlApp(effects, {}, { store }));
    const response = await gql(url, REFUND, { key: randomUUID(), variables: { orderId: 'o', amount: 1 } });
    expect(response.errors![0].extensions).toMatchObject({ code: 'IDEMPOTENCY_STORE_UNAVAILABLE', status: 503 });
    expect(JSON.stringify(response)).not.toContain('10.0.0.7');
    expect(effects.count('refund')).toBe(0);
  });

  it("leaves refusals out of Nest's error log, which still logs the resolver's own errors", async () => {
    const lines: string[] = [];
    let url: string;
    ({ app, url } = await createGraphqlApp(new Effects(), {}, {}, { logger: captureLogger(lines) }));
    const key = randomUUID();
    await gql(url, 'mutation { ping }', { key });
    const own = await gql(url, 'mutation { flaky(orderId: "logged") }', { key: randomUUID() });
    expect(own.errors![0].message).toBe('first attempt fails');
    const missing = await gql(url, 'mutation { ping }', {});
    expect(missing.errors![0].extensions!.code).toBe('IDEMPOTENCY_KEY_MISSING');
    const errors = lines.filter((line) => line.startsWith('error'));
    expect(errors.some((line) => line.includes('first attempt fails'))).toBe(true);
    expect(errors.filter((line) => line.includes('idempotency key'))).toEqual([]);
  });

  it('serves mutations alike with IdempotencyInterceptor registered globally (the protocol runs once)', async () => {
    const effects = new Effects();
    let url: string;
    ({ app, url } = await createGraphqlApp(
      effects,
      {},
      {},
      { providers: [{ provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor }] },
    ));
    const key = randomUUID();
    const operation = 'mutation { a: refund(orderId: "i", amount: 1) { run } b: refund(orderId: "i", amount: 1) { run } }';
    const first = await gql(url, operation, { key });
    expect(first.data).toEqual({ a: { run: 1 }, b: { run: 2 } });
    expect(await gql(url, operation, { key })).toEqual(first);
    const missing = await gql(url, operation, {});
    // Mutations run in order, and a non-null field's error ends the operation: b never runs.
    expect(missing.errors!.map((e) => [e.path, e.extensions!.code])).toEqual([[['a'], 'IDEMPOTENCY_KEY_MISSING']]);
    expect(effects.count('refund:i')).toBe(2);
  });
});

describe('GraphQL records stored by 0.4.0', () => {
  /** Writes every result as 0.4.0 did: the plain JSON value, with the paths of its Dates beside it. */
  class LegacyFormatStore extends MemoryIdempotencyStore {
    override complete(key: string, token: string, request: CompleteRequest): Promise<boolean> {
      const refund = {
        id: 'rf_legacy_1',
        amount: 2,
        run: 1,
        createdAt: '2026-01-01T12:30:00.000Z',
        steps: ['2026-01-01T12:30:00.000Z', '2026-01-01T12:30:01.000Z'],
      };
      const legacy = {
        kind: 'value',
        value: { t: 'j', v: { __nestjsIdempotencyDates: [['createdAt'], ['steps', 0], ['steps', 1]], value: refund } },
      };
      return super.complete(key, token, { ...request, result: JSON.stringify(legacy) });
    }
  }
  let app: INestApplication | undefined;
  afterAll(async () => {
    await app?.close();
  });

  it('still replay, their Dates as DateTime values', async () => {
    const effects = new Effects();
    let url: string;
    ({ app, url } = await createGraphqlApp(effects, {}, { store: new LegacyFormatStore() }));
    const key = randomUUID();
    const query = 'mutation { refund(orderId: "legacy", amount: 2) { id amount run createdAt steps } }';
    const first = await gql(url, query, { key });
    expect(first.errors).toBeUndefined();
    expect(await gql(url, query, { key })).toEqual(first);
    expect(effects.count('refund:legacy')).toBe(1);
  });
});
