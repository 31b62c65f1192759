import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildPageApps, cleanUpDocApps, requestJson, run, startHttpApp, stopApp } from './support/doc-app.js';

/**
 * docs/steps.md as a user meets it: its app built from the page's text against the built
 * package and started; a request that fails after its first step, its retry (which resumes
 * after the recorded step) and a replay.
 */
describe('docs/steps.md, built and run as a user would', () => {
  let dir: string;

  beforeAll(async () => {
    dir = (await buildPageApps('steps', ['steps'])).get('steps')!;
  }, 300_000);
  afterAll(() => cleanUpDocApps());

  it('a retry after a failure resumes after the finished steps: one refund, one ledger entry', async () => {
    const { base, app } = await startHttpApp(dir);
    try {
      const key = randomUUID();
      const body = { amount: 500 };
      const first = await requestJson(base, 'POST', '/orders/o1/refund', { body, key });
      expect(first.status).toBe(500);
      const retry = await requestJson(base, 'POST', '/orders/o1/refund', { body, key });
      expect(retry).toMatchObject({ status: 201, body: { refundId: 're_1' } });
      const replay = await requestJson(base, 'POST', '/orders/o1/refund', { body, key });
      expect(replay).toMatchObject({ status: 201, replayed: 'true', body: { refundId: 're_1' } });
      const effects = await requestJson(base, 'GET', '/effects', {});
      expect(effects.body).toEqual({ refunds: 1, ledger: ['o1:re_1'] });
    } finally {
      await stopApp(app);
    }
  });

  it("the page's curl commands, verbatim: 500, 201, a replayed 201, one refund and one ledger entry", async () => {
    const { base, app } = await startHttpApp(dir);
    try {
      const script = readFileSync(join(dir, 'call.sh'), 'utf8').replaceAll('localhost:3000', base);
      expect((await run('bash', ['-c', script], dir)).trim().split('\n')).toEqual([
        '500',
        '201',
        '201',
        '{"refunds":1,"ledger":["o1:re_1"]}',
      ]);
    } finally {
      await stopApp(app);
    }
  });
});
