import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { IdempotencyInterceptor } from '../../lib/index.js';
import { createGraphqlApp, Effects, gql } from './graphql-app.js';

/**
 * The principal of a mutation is read where GraphQL applications put the user: the
 * GraphQL context (`context: ({ req }) => ({ req, user })`) as well as `request.user`.
 * Test authentication: `x-ctx-user: alice` puts `{ id: 'alice' }` in the context (`!`: a
 * user without an id); `x-user` sets `request.user` (the guard of graphql-app.ts).
 */
const REFUND = 'mutation Refund($orderId: String!) { refund(orderId: $orderId, amount: 1) { id run } }';

function contextUser(header: string | string[] | undefined): unknown {
  if (header === '!') return { name: 'no id' };
  return header ? { id: header } : undefined;
}

describe.each([
  ['the method wrapper', false],
  ['IdempotencyInterceptor registered globally', true],
])('GraphQL principal from the context and the request (%s)', (_entry, viaInterceptor) => {
  const effects = new Effects();
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    ({ app, url } = await createGraphqlApp(
      effects,
      {},
      {},
      {
        providers: viaInterceptor ? [{ provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor }] : [],
        graphql: {
          context: ({ req }: { req: { headers: Record<string, string> } }) => ({ req, user: contextUser(req.headers['x-ctx-user']) }),
        },
      },
    ));
  });
  afterAll(async () => {
    await app?.close();
  });

  const as = (headers: Record<string, string>, orderId: string, key: string) => gql(url, REFUND, { key, headers, variables: { orderId } });

  it("scopes keys by the context's user: one user never receives another's stored result", async () => {
    const orderId = randomUUID();
    const key = randomUUID();
    const alice = await as({ 'x-ctx-user': 'alice' }, orderId, key);
    const bob = await as({ 'x-ctx-user': 'bob' }, orderId, key);
    expect(alice.data!.refund.run).toBe(1);
    expect(bob.data!.refund.run).toBe(2);
    expect(await as({ 'x-ctx-user': 'alice' }, orderId, key)).toEqual(alice);
    expect(await as({ 'x-ctx-user': 'bob' }, orderId, key)).toEqual(bob);
    // Anonymous is a principal of its own too.
    expect((await as({}, orderId, key)).data!.refund.run).toBe(3);
    expect(effects.count(`refund:${orderId}`)).toBe(3);
  });

  it("fails closed when the context's user has no readable id", async () => {
    const orderId = randomUUID();
    const refused = await as({ 'x-ctx-user': '!' }, orderId, randomUUID());
    expect(refused.data).toBeNull();
    expect(refused.errors![0].extensions).toMatchObject({ code: 'IDEMPOTENCY_CONFIGURATION_ERROR', status: 500 });
    expect(effects.count(`refund:${orderId}`)).toBe(0);
  });

  it('takes one principal from both places when they agree, and refuses when they differ', async () => {
    const orderId = randomUUID();
    const key = randomUUID();
    const both = await as({ 'x-ctx-user': 'carol', 'x-user': 'carol' }, orderId, key);
    expect(both.data!.refund.run).toBe(1);
    expect(await as({ 'x-ctx-user': 'carol' }, orderId, key)).toEqual(both);
    expect(await as({ 'x-user': 'carol' }, orderId, key)).toEqual(both);

    const differ = await as({ 'x-ctx-user': 'carol', 'x-user': 'dave' }, orderId, randomUUID());
    expect(differ.data).toBeNull();
    expect(differ.errors![0].extensions).toMatchObject({ code: 'IDEMPOTENCY_CONFIGURATION_ERROR', status: 500 });
    // A request.user without an id is refused even when the context's user has one.
    const noId = await as({ 'x-ctx-user': 'carol', 'x-user': '!' }, orderId, randomUUID());
    expect(noId.errors![0].extensions!.code).toBe('IDEMPOTENCY_CONFIGURATION_ERROR');
    expect(effects.count(`refund:${orderId}`)).toBe(1);
  });
});
