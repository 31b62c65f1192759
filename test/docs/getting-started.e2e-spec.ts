import { randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import * as amqp from 'amqplib';
import { RABBITMQ_URL } from '../messages/support.js';
import { buildPageApps, cleanUpDocApps, run, requestJson, runApp, startApp, startHttpApp, stopApp, waitFor } from './support/doc-app.js';

/**
 * The getting-started page, and the RabbitMQ quick start of docs/messages.md, as a user
 * meets them (test/docs/support/doc-app.ts): each app built by `tsc` with the page's own
 * package.json (an ES module project) and tsconfig.json against the built package, started
 * with `node dist/main.js` like the page's `npm start`, sent a request and its retry on the
 * real services, and closed as a test's afterAll closes it (the process must then end by
 * itself). A page that drifts from the package fails here. The page's SQL store is
 * typeorm.md's application (test/docs/typeorm.e2e-spec.ts).
 */
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

async function post(base: string, path: string, body: unknown, key?: string) {
  const { status, replayed, body: answer } = await requestJson(base, 'POST', path, { body, key });
  return { status, replayed, body: answer as Record<string, unknown> };
}

/** Step 3 of the page: a payment, its retry, the key reused with another body, no key. */
async function expectStepThree(base: string): Promise<void> {
  const key = randomUUID();
  const first = await post(base, '/payments', { amount: 500, currency: 'EUR' }, key);
  expect(first).toMatchObject({ status: 201, replayed: null, body: { amount: 500, currency: 'EUR' } });
  expect(first.body.id).toMatch(/^pay_/);
  const retry = await post(base, '/payments', { amount: 500, currency: 'EUR' }, key);
  expect(retry).toEqual({ status: 201, replayed: 'true', body: first.body });
  const reused = await post(base, '/payments', { amount: 900, currency: 'EUR' }, key);
  expect(reused.status).toBe(422);
  expect(reused.body.code).toBe('IDEMPOTENCY_FINGERPRINT_MISMATCH');
  const keyless = await post(base, '/payments', { amount: 500, currency: 'EUR' });
  expect(keyless.status).toBe(400);
  expect(keyless.body.code).toBe('IDEMPOTENCY_KEY_MISSING');
}

describe('docs/getting-started.md and the RabbitMQ quick start, built and run as a user would', () => {
  const dirs = new Map<string, string>();

  beforeAll(async () => {
    // The RabbitMQ app's package.json and tsconfig.json are getting started's, as the page says.
    for (const [page, names] of [
      ['getting-started', ['default', 'redis']],
      ['messages', ['rabbitmq']],
    ] as const) {
      for (const [name, dir] of await buildPageApps(page, [...names])) dirs.set(name === 'default' ? 'memory' : name, dir);
    }
  }, 300_000);

  afterAll(() => cleanUpDocApps());

  it('the memory store app (steps 2 and 3)', async () => {
    const { base, app } = await startHttpApp(dirs.get('memory')!);
    await expectStepThree(base);
    // Step 3's curl commands as the page prints them, on this app's port.
    const script = readFileSync(join(dirs.get('memory')!, 'call.sh'), 'utf8').replaceAll('localhost:3000', base);
    const statuses = [
      ...(await run('bash', ['-c', script], dirs.get('memory')!)).matchAll(/HTTP\/[\d.]+ (\d+).*$|idempotent-replayed: (\S+)/gim),
    ];
    expect(statuses.map(([, status, replayed]) => status ?? `replayed ${replayed}`)).toEqual(['201', '201', 'replayed true', '422', '400']);
    await stopApp(app);
  });

  it('the Redis app (step 4)', async () => {
    const { base, app } = await startHttpApp(dirs.get('redis')!, { REDIS_URL });
    await expectStepThree(base);
    await stopApp(app);
  });

  it("the Redis app's module closes its client: after app.close() the process ends by itself, as a test's afterAll needs", async () => {
    // What a test of the app does (testing.md): boot the module, close it, nothing else. A
    // client left open keeps the process alive, and runApp() rejects at its deadline.
    const dir = dirs.get('redis')!;
    writeFileSync(
      join(dir, 'dist', 'close-check.js'),
      [
        "import { NestFactory } from '@nestjs/core';",
        "import { AppModule } from './app.module.js';",
        'const app = await NestFactory.create(AppModule, { logger: false });',
        'await app.init();',
        'await app.close();',
      ].join('\n'),
    );
    const { code, output } = await runApp(dir, 'dist/close-check.js', { REDIS_URL }, 15_000);
    expect({ code, output }).toEqual({ code: 0, output: '' });
  });

  it('the RabbitMQ quick start: a retried refund.quote gets the first answer', async () => {
    const queue = `docs-refunds-${process.pid}-${Date.now()}`;
    const app = startApp(dirs.get('rabbitmq')!, { AMQP_URL: RABBITMQ_URL, REFUNDS_QUEUE: queue });
    const connection = await amqp.connect(RABBITMQ_URL);
    try {
      const channel = await connection.createChannel();
      await waitFor(
        'the quick start to consume its queue',
        async () => {
          if (app.child.exitCode !== null) throw new Error(`the app exited (${app.child.exitCode}):\n${app.output()}`);
          const probe = await connection.createChannel();
          probe.on('error', () => {});
          try {
            return (await probe.checkQueue(queue)).consumerCount > 0;
          } catch {
            return false;
          } finally {
            await probe.close().catch(() => {});
          }
        },
        30_000,
      );
      const { queue: replyTo } = await channel.assertQueue('', { exclusive: true });
      const replies = new Map<string, unknown>();
      await channel.consume(
        replyTo,
        (message) => {
          if (message) replies.set(message.properties.correlationId as string, JSON.parse(message.content.toString()));
        },
        { noAck: true },
      );
      const messageId = randomUUID();
      const ask = async () => {
        const correlationId = randomUUID();
        const request = { pattern: 'refund.quote', data: { refundId: 'r1', accountId: 'a1', amount: 12 }, id: correlationId };
        channel.sendToQueue(queue, Buffer.from(JSON.stringify(request)), { replyTo, correlationId, messageId });
        await waitFor('the reply', () => replies.has(correlationId), 15_000);
        return (replies.get(correlationId) as { response: { quoteId: string; amount: number } }).response;
      };
      const first = await ask();
      expect(first).toMatchObject({ refundId: 'r1', amount: 12 });
      expect(first.quoteId).toMatch(/^[0-9a-f-]{36}$/);
      await expect(ask()).resolves.toEqual(first);
      // Another message id is another request: a new quote.
      const other = await (async () => {
        const correlationId = randomUUID();
        channel.sendToQueue(
          queue,
          Buffer.from(
            JSON.stringify({ pattern: 'refund.quote', data: { refundId: 'r1', accountId: 'a1', amount: 12 }, id: correlationId }),
          ),
          {
            replyTo,
            correlationId,
            messageId: randomUUID(),
          },
        );
        await waitFor('the reply', () => replies.has(correlationId), 15_000);
        return (replies.get(correlationId) as { response: { quoteId: string } }).response;
      })();
      expect(other.quoteId).not.toBe(first.quoteId);
    } finally {
      await stopApp(app);
      const cleanup = await connection.createChannel();
      for (const name of [queue, `${queue}.dead`]) await cleanup.deleteQueue(name).catch(() => {});
      await cleanup.deleteExchange(`${queue}.dead-letter`).catch(() => {});
      await connection.close();
    }
  });
});
