import { randomUUID } from 'node:crypto';
import { buildPageApps, cleanUpDocApps, pageApps, requestJson, startHttpApp, stopApp } from './support/doc-app.js';

/**
 * docs/performance.md's sizing example as a user meets it: the app built from the page's
 * text against the built package and started; 1 200 orders with distinct keys through a
 * memory store of 1 000, then what the page says: 1 000 records, 200 dropped before
 * their ttl, the latest key replayed, the first one run again.
 */
describe('docs/performance.md, built and run as a user would', () => {
  let dir: string;

  beforeAll(async () => {
    // The page's src/main.ts is getting started's, as it says.
    const main = pageApps('getting-started').get('default')!.get('src/main.ts')!;
    const sizing = new Map([...pageApps('performance').get('sizing')!, ['src/main.ts', main]]);
    dir = (await buildPageApps('performance', ['sizing-app'], { extra: { 'sizing-app': sizing } })).get('sizing-app')!;
  }, 300_000);
  afterAll(() => cleanUpDocApps());

  it('keeps maxEntries records, counts each result dropped before its ttl, replays the latest key and runs the first again', async () => {
    const { base, app } = await startHttpApp(dir);
    try {
      const keys = Array.from({ length: 1_200 }, () => randomUUID());
      const ids = new Map<string, string>();
      for (let i = 0; i < keys.length; i += 20) {
        await Promise.all(
          keys.slice(i, i + 20).map(async (key) => {
            const answer = await requestJson(base, 'POST', '/orders', { body: { sku: 'book' }, key });
            expect(answer.status).toBe(201);
            ids.set(key, (answer.body as { id: string }).id);
          }),
        );
      }
      const size = await requestJson(base, 'GET', '/idempotency-store', {});
      expect(size.body).toEqual({ records: 1_000, maxEntries: 1_000, evictedBeforeExpiry: 200 });

      const latest = keys[keys.length - 1];
      const replay = await requestJson(base, 'POST', '/orders', { body: { sku: 'book' }, key: latest });
      expect(replay).toMatchObject({ status: 201, replayed: 'true', body: { id: ids.get(latest) } });

      const first = await requestJson(base, 'POST', '/orders', { body: { sku: 'book' }, key: keys[0] });
      expect(first.status).toBe(201);
      expect(first.replayed).not.toBe('true');
      expect((first.body as { id: string }).id).not.toBe(ids.get(keys[0]));
    } finally {
      await stopApp(app);
    }
  }, 120_000);
});
