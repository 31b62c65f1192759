import { randomUUID } from 'node:crypto';
import { sampleValue } from '../observability/metrics-scrape.js';
import { buildPageApps, cleanUpDocApps, requestJson, startHttpApp, stopApp, waitFor } from './support/doc-app.js';

/**
 * docs/observability.md as a user meets it: the page's application (payments route,
 * logger, Prometheus and OpenTelemetry listeners, /metrics, /health, the support routes)
 * built from the page's text and run; a payment, its retry and a reused key must produce
 * the log lines, metric samples and spans the page shows, with the key only hashed.
 */
describe('docs/observability.md, built and run as a user would', () => {
  let dir: string;

  beforeAll(async () => {
    dir = (await buildPageApps('observability', ['default'])).get('default')!;
  }, 300_000);

  afterAll(() => cleanUpDocApps());

  it('a payment and its retry: logged, counted on /metrics and traced; /health, inspect and forget; exit on SIGTERM', async () => {
    const { base, app } = await startHttpApp(dir);
    const key = randomUUID();
    const payment = { amount: 500, currency: 'EUR' };
    const first = await requestJson(base, 'POST', '/payments', { key, body: payment });
    expect(first).toMatchObject({ status: 201, replayed: null, body: payment });
    const retry = await requestJson(base, 'POST', '/payments', { key, body: payment });
    expect(retry).toMatchObject({ status: 201, replayed: 'true', body: first.body });
    const reused = await requestJson(base, 'POST', '/payments', { key, body: { ...payment, amount: 900 } });
    expect(reused.status).toBe(422);

    // The logger: one line per event, at the page's levels, with the hashed key, never the raw one.
    const output = () => app.output().replace(/\x1b\[[0-9;]*m/g, ''); // Nest colours its lines
    await waitFor('the fingerprint_mismatch line', () => output().includes('fingerprint_mismatch PaymentsController.create'), 5_000);
    const keyHash = /\[Idempotency\] claimed PaymentsController\.create key=([A-Za-z0-9_-]{43}) /.exec(output())?.[1];
    expect(keyHash).toBeDefined();
    const lines = output()
      .split('\n')
      .filter((line) => line.includes('[Idempotency] '))
      // `[Nest] 4242  - <the locale's date and time>   DEBUG [Idempotency] ...`: keep the level on.
      .map((line) => line.replace(/^\[Nest\] \d+\s+-\s.*?\s+(?=(DEBUG|LOG|WARN) \[Idempotency\])/, ''));
    expect(lines).toEqual([
      expect.stringMatching(
        new RegExp(`^DEBUG \\[Idempotency\\] claimed PaymentsController\\.create key=${keyHash} in \\d+ ms \\(store \\d+ ms\\)$`),
      ),
      expect.stringMatching(
        new RegExp(`^DEBUG \\[Idempotency\\] completed PaymentsController\\.create key=${keyHash} in \\d+ ms \\(store \\d+ ms\\)$`),
      ),
      expect.stringMatching(
        new RegExp(`^LOG \\[Idempotency\\] replayed PaymentsController\\.create key=${keyHash} in \\d+ ms \\(store \\d+ ms\\)$`),
      ),
      expect.stringMatching(
        new RegExp(
          `^WARN \\[Idempotency\\] fingerprint_mismatch PaymentsController\\.create key=${keyHash} in \\d+ ms \\(store \\d+ ms\\)$`,
        ),
      ),
    ]);

    // The metrics the page documents, scraped from its /metrics route.
    const scrape = await fetch(`${base}/metrics`);
    expect(scrape.status).toBe(200);
    expect(scrape.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
    const metrics = await scrape.text();
    const handler = 'PaymentsController.create';
    for (const [event, count] of [
      ['claimed', 1],
      ['completed', 1],
      ['replayed', 1],
      ['fingerprint_mismatch', 1],
    ] as const) {
      expect([event, sampleValue(metrics, 'idempotency_events_total', { event, handler })]).toEqual([event, count]);
    }
    expect(metrics).toContain('# TYPE idempotency_store_latency_seconds histogram');
    expect(sampleValue(metrics, 'idempotency_store_latency_seconds_count', { event: 'claimed' })).toBe(1);
    expect(sampleValue(metrics, 'idempotency_store_latency_seconds_bucket', { event: 'replayed', le: '2.5' })).toBe(1);

    // The spans the console exporter of src/tracing.ts prints, carrying the same key hash.
    for (const name of ['idempotency claimed', 'idempotency completed', 'idempotency replayed', 'idempotency fingerprint_mismatch']) {
      expect(output()).toContain(`name: '${name}'`);
    }
    expect(output()).toContain(`'idempotency.key_hash': '${keyHash}'`);
    expect(output()).toContain(`'idempotency.handler': '${handler}'`);
    expect(output()).not.toContain(key);

    // GET /health: the indicator of src/health.module.ts.
    const health = await requestJson(base, 'GET', '/health');
    expect(health).toMatchObject({ status: 200, body: { status: 'ok', info: { idempotency: { status: 'up' } } } });
    expect(typeof health.body.info.idempotency.responseTimeMs).toBe('number');

    // The support routes: inspect the record behind the raw key, forget it, and the retry runs again.
    const locator = `operation=${encodeURIComponent('POST /payments')}`;
    const shown = await requestJson(base, 'GET', `/admin/idempotency/${key}?${locator}`);
    expect(shown).toMatchObject({ status: 200, body: { status: 'completed', httpStatus: 201, body: first.body } });
    expect(Date.parse(shown.body.expiresAt)).toBeGreaterThan(Date.now());
    expect(await requestJson(base, 'GET', `/admin/idempotency/${randomUUID()}?${locator}`)).toMatchObject({ status: 404 });
    expect(await requestJson(base, 'DELETE', `/admin/idempotency/${key}?${locator}`)).toMatchObject({
      status: 200,
      body: { deleted: true },
    });
    const again = await requestJson(base, 'POST', '/payments', { key, body: payment });
    expect(again).toMatchObject({ status: 201, replayed: null, body: payment });
    expect(again.body.id).not.toBe(first.body.id);
    const after = await (await fetch(`${base}/metrics`)).text();
    expect(sampleValue(after, 'idempotency_events_total', { event: 'claimed', handler })).toBe(2);

    await stopApp(app);
  });
});
