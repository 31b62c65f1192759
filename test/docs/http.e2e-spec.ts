import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildPageApps, cleanUpDocApps, requestJson, run, startHttpApp, stopApp, type JsonAnswer } from './support/doc-app.js';

/**
 * docs/http.md as a user meets it (test/docs/support/doc-app.ts): the page's application,
 * built by `tsc` from the page's own files with getting-started's tsconfig.json, started
 * with `node dist/main.js` on Express and on Fastify (the page's other src/main.ts), and
 * sent the page's curl commands and every answer its tables claim.
 */
const alice = { authorization: 'Bearer alice' };

function pay(base: string, key: string | undefined, amount: number, headers: Record<string, string> = alice): Promise<JsonAnswer> {
  return requestJson(base, 'POST', '/payments', { body: { amount }, key, headers });
}

function expectProblem(answer: JsonAnswer, status: number, code: string): void {
  expect({ status: answer.status, code: answer.body?.code }).toEqual({ status, code });
  // "application/problem+json on NestJS 12 (Express and Fastify)"
  expect(answer.headers.get('content-type')).toMatch(/^application\/problem\+json/);
  expect(typeof answer.body.hint).toBe('string');
}

/** The page's call.sh, on this app's port: the statuses and headers it prints, and the payments listed. */
async function expectCallScript(dir: string, base: string): Promise<void> {
  const script = readFileSync(join(dir, 'call.sh'), 'utf8').replaceAll('localhost:3000', base);
  const lines = (await run('bash', ['-c', script], dir))
    .split('\n')
    .map((line) => line.trim())
    .filter(Boolean)
    .map((line) => /^HTTP\/[\d.]+ (\d+)/.exec(line)?.[1] ?? line.toLowerCase());
  // The two concurrent requests print in either order.
  expect(lines.slice(0, 3).sort()).toEqual(['201', '409', 'retry-after: 1']);
  expect(lines.slice(3, 8)).toEqual(['201', 'idempotent-replayed: true', '422', '201', lines[7]]);
  expect(JSON.parse(lines[7])).toEqual([
    { id: 'pay_1', amount: 500 },
    { id: 'pay_2', amount: 500 },
  ]);
}

/** Every claim of the page's tables and sections that the application shows. */
async function expectEveryAnswer(base: string): Promise<void> {
  // The key; concurrent duplicates: one runs, the other is told to come back.
  const key = randomUUID();
  const pair = await Promise.all([pay(base, key, 70), pay(base, key, 70)]);
  const [first, busy] = pair[0].status === 201 ? pair : [pair[1], pair[0]];
  expect(first).toMatchObject({ status: 201, replayed: null, body: { amount: 70 } });
  expectProblem(busy, 409, 'IDEMPOTENCY_REQUEST_IN_FLIGHT');
  expect(busy.headers.get('retry-after')).toBe('1');

  // A replay: stored status and body, allow-listed and replayHeaders headers, Idempotent-Replayed.
  const replay = await pay(base, key, 70);
  expect(replay).toMatchObject({ status: 201, replayed: 'true', body: first.body });
  expect(replay.headers.get('location')).toBe(`/payments/${first.body.id}`);
  expect(replay.headers.get('x-payment-id')).toBe(first.body.id);
  expect(first.headers.get('location')).toBe(`/payments/${first.body.id}`);
  // X-Idempotency-Key is accepted as well, naming the same key.
  const viaX = await pay(base, undefined, 70, { ...alice, 'x-idempotency-key': key });
  expect(viaX).toMatchObject({ status: 201, replayed: 'true', body: first.body });

  // Refusals, each a problem document.
  expectProblem(await pay(base, key, 71), 422, 'IDEMPOTENCY_FINGERPRINT_MISMATCH');
  expectProblem(await pay(base, undefined, 70), 400, 'IDEMPOTENCY_KEY_MISSING');
  expectProblem(await pay(base, 'a, b', 70), 400, 'IDEMPOTENCY_KEY_INVALID');
  expectProblem(await pay(base, key, 70, { ...alice, 'x-idempotency-key': randomUUID() }), 400, 'IDEMPOTENCY_KEY_INVALID');
  expectProblem(await pay(base, 'k'.repeat(256), 70), 400, 'IDEMPOTENCY_KEY_INVALID');
  // A structured-field string is the same key unquoted.
  expect(await pay(base, `"${key}"`, 70)).toMatchObject({ status: 201, replayed: 'true', body: first.body });

  // Keys are scoped per user: the same key from another user is that user's own payment.
  const bobs = await pay(base, key, 70, { authorization: 'Bearer bob' });
  expect(bobs).toMatchObject({ status: 201, replayed: null, body: { amount: 70 } });
  expect(bobs.body.id).not.toBe(first.body.id);
  const listed = await requestJson(base, 'GET', '/payments');
  expect(listed.body.filter((payment: { amount: number }) => payment.amount === 70)).toEqual([first.body, bobs.body]);

  // cacheErrors: a 402 is stored and replayed (the same attempt); a 503 releases the key.
  const chargeKey = randomUUID();
  const declined = await requestJson(base, 'POST', '/charges', { body: { amount: 5 }, key: chargeKey });
  expect(declined).toMatchObject({ status: 402, replayed: null, body: { code: 'card_declined' } });
  const declinedAgain = await requestJson(base, 'POST', '/charges', { body: { amount: 5 }, key: chargeKey });
  expect(declinedAgain).toMatchObject({ status: 402, replayed: 'true', body: declined.body });
  const outageKey = randomUUID();
  const outage = await requestJson(base, 'POST', '/charges', { body: { amount: 20_000 }, key: outageKey });
  const outageRetry = await requestJson(base, 'POST', '/charges', { body: { amount: 20_000 }, key: outageKey });
  expect([outage.status, outageRetry.status, outageRetry.replayed]).toEqual([503, 503, null]);
  expect(outageRetry.body.attempt).toBe(outage.body.attempt + 1);

  // The serializer's answer is what is stored: no passwordHash, the same account on a replay.
  const accountKey = randomUUID();
  const account = await requestJson(base, 'POST', '/accounts', { key: accountKey });
  expect(account).toMatchObject({ status: 201, replayed: null });
  expect(Object.keys(account.body)).toEqual(['id']);
  expect(await requestJson(base, 'POST', '/accounts', { key: accountKey })).toMatchObject({
    status: 201,
    replayed: 'true',
    body: account.body,
  });

  // A webhook keyed by its body, delivered three times at once: one run, every copy its answer.
  const event = { id: `evt_${randomUUID()}`, type: 'charge.succeeded', data: {} };
  const deliveries = await Promise.all([0, 1, 2].map(() => requestJson(base, 'POST', '/webhooks/provider', { body: event })));
  for (const delivery of deliveries)
    expect(delivery).toMatchObject({ status: 200, body: { handled: event.id, run: deliveries[0].body.run } });
  expect(deliveries.filter((delivery) => delivery.replayed === 'true')).toHaveLength(2);
}

describe('docs/http.md, built and run as a user would', () => {
  let dirs: Map<string, string>;

  beforeAll(async () => {
    dirs = await buildPageApps('http', ['default', 'fastify']);
  }, 300_000);

  afterAll(() => cleanUpDocApps());

  it.each([
    ['Express', 'default'],
    ['Fastify', 'fastify'],
  ])('on %s: the curl commands, then every answer the page shows', async (_adapter, name) => {
    const dir = dirs.get(name)!;
    const { base, app } = await startHttpApp(dir);
    await expectCallScript(dir, base);
    await expectEveryAnswer(base);
    await stopApp(app);
  });
});
