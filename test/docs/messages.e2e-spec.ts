import { NATS_URL } from '../messages/support.js';
import { buildPageApps, cleanUpDocApps, freePort, runApp, startApp, stopApp, waitFor, type RunningApp } from './support/doc-app.js';

/**
 * The NATS, MQTT and TCP applications of docs/messages.md as a user meets them
 * (test/docs/support/doc-app.ts): built by `tsc` from the page's own files with
 * getting-started's tsconfig.json, the consumer started with `node dist/main.js`, and the
 * page's producer (`node dist/send.js`) sending a quote request and a refund event twice
 * each with one key. The RabbitMQ quick start is run by getting-started.e2e-spec.ts, and
 * the Kafka application is only type-checked (scripts/check-docs.mjs): no broker here.
 */
const MQTT_URL = process.env.TEST_MQTT_URL ?? 'mqtt://127.0.0.1:1883';

const count = (text: string, needle: string) => text.split(needle).length - 1;

/** Resolves once Nest reports the consumer listening; rejects if it exits first. */
async function listening(app: RunningApp): Promise<void> {
  await waitFor(
    'the consumer to listen',
    () => {
      if (app.child.exitCode !== null) throw new Error(`the consumer exited (${app.child.exitCode}):\n${app.output()}`);
      return app.output().includes('Nest microservice successfully started');
    },
    30_000,
  );
}

describe('docs/messages.md: the consumer on NATS, MQTT and TCP, built and run as a user would', () => {
  let dirs: Map<string, string>;

  beforeAll(async () => {
    dirs = await buildPageApps('messages', ['nats', 'mqtt', 'tcp']);
  }, 300_000);

  afterAll(() => cleanUpDocApps());

  it.each([
    ['NATS, keyed by an Idempotency-Key header', 'nats', async () => ({ NATS_URL })],
    ['MQTT 5, keyed by a user property', 'mqtt', async () => ({ MQTT_URL })],
    ['TCP, keyed by a field of the payload', 'tcp', async () => ({ PORT: String(await freePort()) })],
  ])('%s: a retried request gets the first answer, a copy of an event runs nothing', async (_what, name, environment) => {
    const dir = dirs.get(name)!;
    const env = await environment();
    const consumer = startApp(dir, env);
    try {
      await listening(consumer);
      const sent = await runApp(dir, 'dist/send.js', env, 30_000);
      if (sent.code !== 0) throw new Error(`node dist/send.js exited ${sent.code}:\n${sent.output}`);
      const [, quote, retried] = /quote (\S+), retried (\S+)/.exec(sent.output) ?? [];
      expect(quote).toMatch(/^[0-9a-f-]{36}$/);
      expect(retried).toBe(quote);
      // The copy of the event is recognised (the module's onEvent line), and the refund ran once.
      await waitFor('the copy of the refund event', () => consumer.output().includes('replayed RefundsController.refund'), 15_000);
      expect(count(consumer.output(), 'replayed RefundsController.quote')).toBe(1);
      expect(count(consumer.output(), 'refunded rf_1')).toBe(1);
    } finally {
      await stopApp(consumer);
    }
  });
});
