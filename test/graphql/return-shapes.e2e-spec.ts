import { randomUUID } from 'node:crypto';
import type { INestApplication } from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { IdempotencyInterceptor, MemoryIdempotencyStore } from '../../lib/index.js';
import type { CompleteRequest } from '../../lib/core/store.js';
import { gql } from './graphql-app.js';
import { createShapesApp } from './shapes-app.js';
import { Effects } from '../support/effects.js';

/**
 * A replay resolves exactly as the first answer did, whatever the mutation returns:
 * unions and interfaces (Nest's `instanceof` resolvers and user `resolveType`s),
 * `isTypeOf` types, getter fields, enums, DateTime and a custom class scalar, nested in
 * objects, lists and Sets; and for any selection the retry makes.
 */
const CHECKOUT = `mutation Checkout($id: String!) {
  checkout(orderId: $id) {
    __typename id status priority total run customerName
    payments { __typename ... on Card { last4 limit } ... on Wire { iban sentAt } }
    preferred { __typename ... on Card { last4 } ... on Wire { iban sentAt } }
    buyer { __typename id ... on Person { fullName nickname } ... on Company { legalName } }
    parties { __typename id ... on Person { fullName } ... on Company { legalName } }
    ledger { __typename at ... on PaymentEvent { amount } ... on RefundEvent { reason } }
    receipt { number }
  }
}`;

function firstAnswerOf(id: string) {
  const at = '2026-02-01T08:00:00.000Z';
  return {
    status: 200,
    data: {
      checkout: {
        __typename: 'Order',
        id,
        status: 'Paid',
        priority: 'High',
        total: '12.51 EUR',
        run: 1,
        customerName: 'Grace Hopper',
        payments: [
          { __typename: 'Card', last4: '4242', limit: '1500.00 EUR' },
          { __typename: 'Wire', iban: 'DE89370400440532013000', sentAt: at },
        ],
        preferred: { __typename: 'Wire', iban: 'DE89370400440532013000', sentAt: at },
        buyer: { __typename: 'Person', id: 'p_1', fullName: 'Ada Lovelace', nickname: null },
        parties: [
          { __typename: 'Company', id: 'c_1', legalName: 'Analytical Engines Ltd' },
          { __typename: 'Person', id: 'p_1', fullName: 'Ada Lovelace' },
        ],
        ledger: [
          { __typename: 'PaymentEvent', at, amount: '12.50 EUR' },
          { __typename: 'RefundEvent', at, reason: 'damaged' },
        ],
        receipt: { number: 'R-1' },
      },
    },
    errors: [
      {
        message: 'no nickname for Ada',
        locations: expect.any(Array),
        path: ['checkout', 'buyer', 'nickname'],
        extensions: { code: 'INTERNAL_SERVER_ERROR' },
      },
    ],
  };
}

class RecordingStore extends MemoryIdempotencyStore {
  readonly results: string[] = [];
  override complete(key: string, token: string, request: CompleteRequest): Promise<boolean> {
    this.results.push(request.result);
    return super.complete(key, token, request);
  }
}

describe.each([
  ['the method wrapper', false],
  ['IdempotencyInterceptor registered globally', true],
])('GraphQL replays resolve as the first answer (%s)', (_entry, viaInterceptor) => {
  const effects = new Effects();
  const store = new RecordingStore();
  let app: INestApplication;
  let url: string;

  beforeAll(async () => {
    ({ app, url } = await createShapesApp(
      effects,
      { store },
      viaInterceptor ? [{ provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor }] : [],
    ));
  });
  afterAll(async () => {
    await app?.close();
  });

  it('replays unions, interfaces, isTypeOf types, getters, enums, DateTime and a class scalar, with the same data and errors', async () => {
    const id = randomUUID();
    const key = randomUUID();
    const first = await gql(url, CHECKOUT, { key, variables: { id } });
    expect(first).toEqual(firstAnswerOf(id));
    const replay = await gql(url, CHECKOUT, { key, variables: { id } });
    expect(replay).toEqual(first);
    expect(await gql(url, CHECKOUT, { key, variables: { id } })).toEqual(first);
    expect(effects.count(`checkout:${id}`)).toBe(1);
  });

  it('answers a retry that selects more than the first request did, from the same record', async () => {
    const id = randomUUID();
    const key = randomUUID();
    const narrow = await gql(url, 'mutation N($id: String!) { checkout(orderId: $id) { id run } }', { key, variables: { id } });
    expect(narrow.data).toEqual({ checkout: { id, run: 1 } });
    expect(await gql(url, CHECKOUT, { key, variables: { id } })).toEqual(firstAnswerOf(id));
    expect(effects.count(`checkout:${id}`)).toBe(1);
  });

  it('replays a list of a union, an interface, a class scalar and an enum returned at the root', async () => {
    const id = randomUUID();
    const cases: [string, Record<string, unknown>][] = [
      [
        `mutation { pay(orderId: "${id}") { __typename ... on Card { last4 limit } ... on Wire { sentAt } } }`,
        {
          pay: [
            { __typename: 'Card', last4: '4242', limit: '1500.00 EUR' },
            { __typename: 'Wire', sentAt: '2026-02-01T08:00:00.000Z' },
          ],
        },
      ],
      [
        `mutation { signUp(name: "${id}") { __typename id ... on Person { fullName } } }`,
        { signUp: { __typename: 'Person', id: `p_${id}`, fullName: `${id} Doe` } },
      ],
      [`mutation { charge(orderId: "${id}") }`, { charge: '1.00 USD' }],
      [`mutation { close(orderId: "${id}") }`, { close: 'Open' }],
    ];
    for (const [query, data] of cases) {
      const key = randomUUID();
      const first = await gql(url, query, { key });
      expect(first).toEqual({ status: 200, data });
      expect(await gql(url, query, { key })).toEqual(first);
    }
    for (const name of ['pay', 'signUp', 'charge', 'close']) expect(effects.count(`${name}:${id}`)).toBe(1);
  });

  it('runs @ResolveField() resolvers again on a replay, over the replayed parent and its non-schema properties', async () => {
    const id = randomUUID();
    const key = randomUUID();
    const query = 'mutation C($id: String!) { checkout(orderId: $id) { id customerName } }';
    const before = effects.count('customerName');
    const first = await gql(url, query, { key, variables: { id } });
    const replay = await gql(url, query, { key, variables: { id } });
    expect(replay).toEqual(first);
    expect(replay.data!.checkout.customerName).toBe('Grace Hopper');
    // Not a snapshot: the field resolver ran for the first answer and for the replay.
    expect(effects.count('customerName')).toBe(before + 2);
    expect(effects.count(`checkout:${id}`)).toBe(1);
  });

  it('stores the schema fields (getters read), the object JSON would write, the resolved type names and scalar outputs', async () => {
    const id = randomUUID();
    await gql(url, CHECKOUT, { key: randomUUID(), variables: { id } });
    const stored = store.results.find((result) => result.includes(id))!;
    expect(stored).toContain('"fullName":"Ada Lovelace"');
    expect(stored).toContain('"total":"12.51 EUR"');
    expect(stored).toContain('"customerId":"cus_7"'); // what the customerName field resolver reads
    expect(stored).toContain('"Person":[["buyer"],["parties",1]]'); // type names, once per type
    expect(stored).toContain('"Company":[["parties",0]]');
    expect(stored).not.toContain('customerName'); // resolved by its field resolver, not stored
    expect(stored).toContain('"message":"no nickname for Ada"');
  });
});
