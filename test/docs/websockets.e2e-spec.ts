import { randomUUID } from 'node:crypto';
import { deleteKeys, redisClient } from '../integrations/support.js';
import { buildPageApps, cleanUpDocApps, runApp, startHttpApp, stopApp } from './support/doc-app.js';

/**
 * docs/websockets.md as a user meets it (test/docs/support/doc-app.ts): each application
 * built by `tsc` from the page's own files with getting-started's tsconfig.json, started
 * like `npm start`, and sent the page's own client (`node dist/client.js`), which does not
 * see its acknowledgement in time and sends the order again: the answer it finally gets is
 * the first run's, from the record, and the server charged once. On Redis, two instances:
 * the same order sent to the second gets the first one's answer.
 */
const REDIS_URL = process.env.TEST_REDIS_URL ?? 'redis://127.0.0.1:6379';

// Nest colours its log when it likes; the page's lines are matched without the colours.
const plain = (text: string) => text.replace(/\u001b\[[0-9;]*m/g, '');
const charges = (log: string) =>
  [...plain(log).matchAll(/charged (\w+) for 1 x book: (ord_[0-9a-f-]{36})/g)].map(([, who, id]) => ({ who, id }));

describe('docs/websockets.md, built and run as a user would', () => {
  const dirs = new Map<string, string>();

  beforeAll(async () => {
    for (const [name, dir] of await buildPageApps('websockets', ['default', 'ws', 'redis'])) dirs.set(name, dir);
  }, 300_000);

  afterAll(() => cleanUpDocApps());

  it('socket.io: the client re-sends after its ack timeout and is acknowledged with the first run’s answer; one charge', async () => {
    const { base, app } = await startHttpApp(dirs.get('default')!);
    try {
      const client = await runApp(dirs.get('default')!, 'dist/client.js', { ORDERS_URL: `${base}/orders` }, 30_000);
      const output = plain(client.output);
      expect({ code: client.code, sent: output.match(/^sent place-order$/gm)?.length }).toEqual({ code: 0, sent: 2 });
      const placed = /^placed (ord_[0-9a-f-]{36})$/m.exec(output)?.[1];
      expect(charges(app.output())).toEqual([{ who: 'alice', id: placed }]);
    } finally {
      await stopApp(app);
    }
  });

  it('ws: the client loses its connection, reconnects and sends again; the reply is the first run’s { event, data }; one charge', async () => {
    const { base, app } = await startHttpApp(dirs.get('ws')!);
    try {
      const client = await runApp(dirs.get('ws')!, 'dist/client.js', { ORDERS_URL: `${base.replace('http', 'ws')}/orders` }, 30_000);
      const lines = plain(client.output).trim().split('\n');
      expect({ code: client.code, sent: lines.filter((line) => line === 'sent place-order').length }).toEqual({ code: 0, sent: 2 });
      const reply = JSON.parse(lines[lines.length - 1]) as { event: string; data: { orderId: string } };
      expect(reply).toEqual({ event: 'order-placed', data: { orderId: expect.stringMatching(/^ord_/), sku: 'book', quantity: 1 } });
      expect(charges(app.output())).toEqual([{ who: 'alice', id: reply.data.orderId }]);
    } finally {
      await stopApp(app);
    }
  });

  it('two instances on Redis: the order sent again to the second instance gets the first one’s answer', async () => {
    const prefix = `docs-ws-${process.pid}-${randomUUID().slice(0, 8)}`;
    const env = { REDIS_URL, REDIS_PREFIX: prefix };
    const [a, b] = await Promise.all([startHttpApp(dirs.get('redis')!, env), startHttpApp(dirs.get('redis')!, env)]);
    const redis = redisClient();
    try {
      const requestId = randomUUID();
      const send = (base: string) =>
        runApp(dirs.get('redis')!, 'dist/client.js', { ORDERS_URL: `${base}/orders`, REQUEST_ID: requestId }, 30_000);
      const first = await send(a.base);
      const again = await send(b.base);
      const placed = (run: { output: string }) => /^placed (ord_[0-9a-f-]{36})$/m.exec(plain(run.output))?.[1];
      expect({ first: first.code, again: again.code }).toEqual({ first: 0, again: 0 });
      expect(placed(again)).toBe(placed(first));
      expect(charges(a.app.output())).toEqual([{ who: 'alice', id: placed(first) }]);
      expect(charges(b.app.output())).toEqual([]);
    } finally {
      await Promise.all([stopApp(a.app), stopApp(b.app)]);
      await deleteKeys(redis, prefix);
      redis.disconnect();
    }
  });
});
