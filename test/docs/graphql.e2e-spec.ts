import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildPageApps, cleanUpDocApps, requestJson, run, startHttpApp, stopApp, type RunningApp } from './support/doc-app.js';

/**
 * docs/graphql.md as a user meets it (test/docs/support/doc-app.ts): the quick start's
 * app built by `tsc` from the page's own files with getting-started's tsconfig.json
 * (`strict: true`), started like `npm start`, and sent the page's curl commands and its
 * multi-mutation operations (two-refunds.graphql, changed-retry.graphql) verbatim. The
 * app's `refunds` query is the effect: a replay must leave it unchanged.
 */
interface Refund {
  id: string;
  orderId?: string;
  amount?: number;
}

interface GraphQLAnswer {
  data?: Record<string, unknown> | null;
  errors?: { message: string; path?: string[]; extensions?: { code?: string; status?: number } }[];
}

async function graphql(base: string, query: string, options: { key?: string; variables?: Record<string, unknown> } = {}) {
  const answer = await requestJson(base, 'POST', '/graphql', { body: { query, variables: options.variables }, key: options.key });
  // A refusal is a field error: the HTTP answer stays 200.
  expect(answer.status).toBe(200);
  return answer.body as GraphQLAnswer;
}

async function issued(base: string): Promise<Refund[]> {
  const answer = await graphql(base, '{ refunds { id orderId amount } }');
  return (answer.data as { refunds: Refund[] }).refunds;
}

const REFUND = 'mutation Refund($orderId: String!, $amount: Int!) { refund(orderId: $orderId, amount: $amount) { id orderId amount } }';

describe('docs/graphql.md, built and run as a user would', () => {
  let dir: string;
  let base: string;
  let app: RunningApp;

  beforeAll(async () => {
    dir = (await buildPageApps('graphql', ['default'])).get('default')!;
    ({ base, app } = await startHttpApp(dir));
  }, 300_000);

  afterAll(() => cleanUpDocApps());

  it("the quick start's curl commands: a retry is a replay, the key with another amount is refused, no key is refused", async () => {
    const script = readFileSync(join(dir, 'call.sh'), 'utf8').replaceAll('localhost:3000', base);
    const answers = (await run('bash', ['-c', script], dir))
      .split('\n')
      .filter((line) => line.trim())
      .map((line) => JSON.parse(line) as GraphQLAnswer);
    expect(answers).toHaveLength(5);
    const [first, retry, reused, keyless, listed] = answers;
    const refund = (first.data as { refund: Refund }).refund;
    expect(refund).toEqual({ id: expect.stringMatching(/^rf_[0-9a-f-]{36}$/), amount: 500 });
    expect(retry).toEqual({ data: { refund } });
    expect(reused.errors).toEqual([
      expect.objectContaining({
        path: ['refund'],
        extensions: expect.objectContaining({ code: 'IDEMPOTENCY_FINGERPRINT_MISMATCH', status: 422 }),
      }),
    ]);
    expect(keyless.errors).toEqual([
      expect.objectContaining({ extensions: expect.objectContaining({ code: 'IDEMPOTENCY_KEY_MISSING', status: 400 }) }),
    ]);
    // "one refund issued, for four mutations" (the app is fresh: this test runs first)
    expect(listed).toEqual({ data: { refunds: [refund] } });
  });

  it('a retry sent with variables replays the inline first; the same key with other variables is refused and issues nothing', async () => {
    const key = randomUUID();
    const before = (await issued(base)).length;
    const first = await graphql(base, 'mutation { refund(orderId: "7", amount: 250) { id orderId amount } }', { key });
    const refund = (first.data as { refund: Refund }).refund;
    expect(refund).toMatchObject({ orderId: '7', amount: 250 });
    // "an argument written inline or passed as a variable ... fingerprint alike"
    await expect(graphql(base, REFUND, { key, variables: { orderId: '7', amount: 250 } })).resolves.toEqual({ data: { refund } });
    const reused = await graphql(base, REFUND, { key, variables: { orderId: '7', amount: 251 } });
    expect(reused.data).toBeNull();
    expect(reused.errors).toEqual([
      expect.objectContaining({
        path: ['refund'],
        extensions: expect.objectContaining({ code: 'IDEMPOTENCY_FINGERPRINT_MISMATCH', status: 422 }),
      }),
    ]);
    const after = await issued(base);
    expect(after).toHaveLength(before + 1);
    expect(after.at(-1)).toEqual(refund);
    // A new key is a new refund.
    const other = await graphql(base, REFUND, { key: randomUUID(), variables: { orderId: '7', amount: 250 } });
    expect((other.data as { refund: Refund }).refund.id).not.toBe(refund.id);
  });

  it('the multi-mutation operations of the page: one record per field and alias, judged alone, later fields unrun', async () => {
    const twoRefunds = readFileSync(join(dir, 'two-refunds.graphql'), 'utf8');
    const changedRetry = readFileSync(join(dir, 'changed-retry.graphql'), 'utf8');
    const key = randomUUID();
    const count = async () => (await issued(base)).length;
    const start = await count();

    // a and b are two refunds, two records.
    const first = await graphql(base, twoRefunds, { key });
    const { a, b } = first.data as { a: Refund; b: Refund };
    expect(a.id).not.toBe(b.id);
    expect(await count()).toBe(start + 2);

    // A retry of the whole operation replays both: the same ids, no refund issued.
    await expect(graphql(base, twoRefunds, { key })).resolves.toEqual(first);
    expect(await count()).toBe(start + 2);

    // b changed and c is new: a replayed, only b refused, data null, c never runs.
    const changed = await graphql(base, changedRetry, { key });
    expect(changed.data).toBeNull();
    expect(changed.errors).toEqual([
      expect.objectContaining({ path: ['b'], extensions: expect.objectContaining({ code: 'IDEMPOTENCY_FINGERPRINT_MISMATCH' }) }),
    ]);
    expect(await count()).toBe(start + 2);

    // "a later c under that key is a first run"
    const c = await graphql(base, 'mutation { c: refund(orderId: "42", amount: 100) { id } }', { key });
    expect((c.data as { c: Refund }).c.id).not.toBe(a.id);
    expect(await count()).toBe(start + 3);

    // "A retry that renames a to first is another record, and runs again."
    const renamed = await graphql(base, 'mutation { first: refund(orderId: "42", amount: 100) { id } }', { key });
    expect((renamed.data as { first: Refund }).first.id).not.toBe(a.id);
    expect(await count()).toBe(start + 4);

    // "An unaliased refund(...) has the path refund: another record than a: refund(...)"
    const unaliased = await graphql(base, 'mutation { refund(orderId: "42", amount: 100) { id } }', { key });
    expect((unaliased.data as { refund: Refund }).refund.id).not.toBe(a.id);
    expect(await count()).toBe(start + 5);
  });

  it('exits after SIGTERM (enableShutdownHooks closes the module and its store)', async () => {
    await stopApp(app);
  });
});
