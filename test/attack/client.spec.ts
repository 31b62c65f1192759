import { createIdempotentFetch } from '../../lib/client/index.js';
import { retryAfterMs } from '../../lib/client/retry-policy.js';
import { MemoryIdempotencyStore, makeIdempotent, step, stepKey } from '../../lib/index.js';
import { ScriptedServer, answer } from '../client/scripted-server.js';

/** The outgoing client (issue 28) under inputs its own suite does not try. */
describe('createIdempotentFetch: hostile inputs', () => {
  const server = new ScriptedServer();
  const fast = { minDelay: 1, maxDelay: 5 };

  beforeAll(() => server.start());
  afterAll(() => server.stop());

  it('a Request with a body and a method it does not retry is sent as fetch would send it', async () => {
    const url = server.script('/put-request', answer(200));
    const request = new Request(url, { method: 'PUT', body: 'the body', headers: { 'content-type': 'text/plain' } });
    const response = await createIdempotentFetch(fast)(request);
    expect(response.status).toBe(200);
    expect(server.requestsTo('/put-request').map((seen) => [seen.method, seen.body, seen.key])).toEqual([['PUT', 'the body', undefined]]);
  });

  it('a Request with a body, retried: the same body on every attempt; init overriding the body wins', async () => {
    const url = server.script('/post-request', answer(503), answer(201));
    const request = new Request(url, { method: 'POST', body: 'from the request' });
    expect((await createIdempotentFetch(fast)(request, { body: 'from init' })).status).toBe(201);
    expect(server.requestsTo('/post-request').map((seen) => seen.body)).toEqual(['from init', 'from init']);
  });

  it('the per-attempt timeout bounds the wait for an answer, not the reading of the answer it returned', async () => {
    // Headers at once, the body 300 ms later: the answer came in time, its body must not be cut off.
    const url = server.script('/slow-body', (_request, _index, response) => {
      response.writeHead(201, { 'content-type': 'text/plain' });
      response.write('part one, ');
      setTimeout(() => response.end('part two'), 300).unref();
    });
    const response = await createIdempotentFetch({ ...fast, timeout: 150 })(url, { method: 'POST', body: '{}' });
    expect(response.status).toBe(201);
    await expect(response.text()).resolves.toBe('part one, part two');
  });

  it.each(['-5', '1.5', '1, 2', 'soon', '12 ', ' 0x10'])(
    'Retry-After %p, which is neither delay-seconds nor an HTTP date, is not honoured as "now"',
    (value) => {
      expect(retryAfterMs(value, Date.UTC(2026, 0, 1))).toBe(value.trim() === '12' ? 12_000 : undefined);
    },
  );

  it('Retry-After in the three HTTP date forms is read', () => {
    const now = Date.UTC(1994, 10, 6, 8, 49, 30);
    expect(retryAfterMs('Sun, 06 Nov 1994 08:49:37 GMT', now)).toBe(7000);
    expect(retryAfterMs('Sunday, 06-Nov-94 08:49:37 GMT', now)).toBe(7000);
    expect(retryAfterMs('Sun Nov  6 08:49:37 1994', now)).toBe(7000);
  });

  it("inside a step, a call made by a nested idempotent execution gets that execution's key, not the step's", async () => {
    const store = new MemoryIdempotencyStore();
    const url = server.script('/nested', answer(201));
    const idempotentFetch = createIdempotentFetch(fast);
    const inner = makeIdempotent(
      async (_id: string) => {
        await idempotentFetch(url, { method: 'POST', body: 'inner' });
        return 'done';
      },
      { store, key: (id) => id, scope: 'attack-inner' },
    );
    let outerStepKey = '';
    const outer = makeIdempotent(
      async (id: string) =>
        step('notify', async () => {
          outerStepKey = stepKey('notify');
          return inner(`inner-of-${id}`);
        }),
      { store, key: (id) => id, scope: 'attack-outer' },
    );
    await outer('o1');
    const [seen] = server.requestsTo('/nested');
    // The call belongs to the inner execution (keyed by its own key): the outer step's key is the outer step's.
    expect(seen.key).not.toBe(outerStepKey);
    expect(seen.key).toMatch(/^call_/);
  });
});
