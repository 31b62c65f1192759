import { LosingProxy } from '../client/losing-proxy.js';
import { buildPageApps, cleanUpDocApps, freePort, requestJson, run, startHttpApp, stopApp } from './support/doc-app.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * docs/client.md's application, built from the page: the orders service pays through a
 * proxy that loses the first answer of the payments route on its way back; the order is
 * paid once and the payments route charged once.
 */
describe('docs/client.md, built and run as a user would', () => {
  let dir: string;

  beforeAll(async () => {
    dir = (await buildPageApps('client', ['default'])).get('default')!;
  }, 300_000);

  afterAll(() => cleanUpDocApps());

  it('a charge whose answer is lost is retried with the same key: one charge, and a retried order replays', async () => {
    const port = await freePort();
    const proxy = new LosingProxy(port, 1);
    await proxy.start();
    const { base, app } = await startHttpApp(dir, { PORT: String(port), PAYMENTS_URL: proxy.base });
    try {
      expect(base).toBe(`http://127.0.0.1:${port}`);
      const script = readFileSync(join(dir, 'call.sh'), 'utf8').replaceAll('localhost:3000', base);
      const [order, charges] = (await run('bash', ['-c', script], dir))
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line));
      expect(proxy.lost).toBe(1);
      expect(charges).toEqual([{ id: expect.stringMatching(/^ch_/), amount: 700 }]);
      expect(order).toEqual({ orderId: '42', chargeId: charges[0].id });
      expect(app.output()).toMatch(/charge attempt 1 failed \(network\), retrying in \d+ ms/);
      const retry = await requestJson(base, 'POST', '/orders/42/pay', { body: { amount: 700 }, key: 'order-42' });
      expect(retry).toMatchObject({ status: 201, replayed: 'true', body: order });
      expect((await requestJson(base, 'GET', '/payments/charges')).body).toHaveLength(1);
    } finally {
      await stopApp(app);
      await proxy.stop();
    }
  });
});
