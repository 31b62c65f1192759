import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildPageApps, cleanUpDocApps, requestJson, run, startHttpApp, stopApp, type RunningApp } from './support/doc-app.js';

/**
 * docs/service-methods.md as a user meets it (test/docs/support/doc-app.ts): the page's
 * webhook app built by `tsc` from the page's own files with getting-started's
 * tsconfig.json (`strict: true`), started like `npm start`, and sent the page's curl
 * commands verbatim. `GET /refunds` is the effect: a replayed call must leave it unchanged.
 */
interface Refund {
  id: string;
  refundId: string;
  amount: number;
}

describe('docs/service-methods.md, built and run as a user would', () => {
  let dir: string;
  let base: string;
  let app: RunningApp;

  const webhook = (body: Record<string, unknown>) => requestJson(base, 'POST', '/webhooks/order-refunded', { body });
  const issued = async () => (await requestJson(base, 'GET', '/refunds')).body as Refund[];

  beforeAll(async () => {
    dir = (await buildPageApps('service-methods', ['default'])).get('default')!;
    ({ base, app } = await startHttpApp(dir));
  }, 300_000);

  afterAll(() => cleanUpDocApps());

  it("the page's curl commands: a retried webhook replays the refund, the refundId with another amount is refused", async () => {
    const script = readFileSync(join(dir, 'call.sh'), 'utf8').replaceAll('localhost:3000', base);
    const answers = (await run('bash', ['-c', script], dir))
      .split('\n')
      .filter((line) => line.trim())
      .map((line) => JSON.parse(line) as unknown);
    expect(answers).toHaveLength(4);
    const [first, retry, reused, listed] = answers;
    expect(first).toEqual({ id: expect.stringMatching(/^re_[0-9a-f-]{36}$/), refundId: 'rf_1', amount: 500 });
    expect(retry).toEqual(first);
    expect(reused).toMatchObject({ statusCode: 422, message: 'This idempotency key was already used with a different request.' });
    // "one refund, for three webhooks" (the app is fresh: this test runs first)
    expect(listed).toEqual([first]);
  });

  it('statuses: 200 for the first call and its replay, 422 for the reused refundId; concurrent duplicates make one refund', async () => {
    const refundId = `rf_${randomUUID()}`;
    const before = (await issued()).length;
    const first = await webhook({ refundId, orderId: '7', amount: 250 });
    expect(first).toMatchObject({ status: 200, body: { refundId, amount: 250 } });
    // A service method's replay carries no Idempotent-Replayed header: the route is not idempotent, the method is.
    await expect(webhook({ refundId, orderId: '7', amount: 250 })).resolves.toMatchObject({
      status: 200,
      replayed: null,
      body: first.body,
    });
    await expect(webhook({ refundId, orderId: '8', amount: 250 })).resolves.toMatchObject({ status: 422 });
    expect(await issued()).toHaveLength(before + 1);

    // "a call with the same key while the first runs waits for it ... and gets its value"
    const concurrent = `rf_${randomUUID()}`;
    const answers = await Promise.all([0, 1, 2, 3].map(() => webhook({ refundId: concurrent, orderId: '9', amount: 10 })));
    for (const answer of answers) expect(answer).toMatchObject({ status: 200, body: answers[0].body });
    const after = await issued();
    expect(after).toHaveLength(before + 2);
    expect(after.filter((refund) => refund.refundId === concurrent)).toEqual([answers[0].body]);
  });

  it('exits after SIGTERM (enableShutdownHooks closes the module and its store)', async () => {
    await stopApp(app);
  });
});
