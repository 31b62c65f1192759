import { IdempotencyConfigurationError } from '../../lib/core/errors.js';
import { createIdempotentFetch, type RetryInfo } from '../../lib/client/index.js';
import { ScriptedServer, answer, hangUp, stall } from './scripted-server.js';

/** The retry policy of createIdempotentFetch against a scripted server, over real HTTP. */
describe('createIdempotentFetch against a scripted server', () => {
  const server = new ScriptedServer();
  const fast = { minDelay: 1, maxDelay: 5 };
  const post = (body: unknown = { amount: 700 }): RequestInit => ({
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

  beforeAll(() => server.start());
  afterAll(() => server.stop());

  it('503 twice, then 201: three attempts with one key and the same body, and the 201 returned', async () => {
    const retries: RetryInfo[] = [];
    const url = server.script('/charges-a', answer(503), answer(503), answer(201));
    const response = await createIdempotentFetch({ ...fast, onRetry: (info) => retries.push(info) })(url, post());
    expect(response.status).toBe(201);
    const seen = server.requestsTo('/charges-a');
    expect(seen).toHaveLength(3);
    expect(seen[0].key).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(new Set(seen.map((request) => request.key)).size).toBe(1);
    expect(seen.map((request) => request.body)).toEqual(Array(3).fill('{"amount":700}'));
    expect(retries.map(({ attempt, reason, status, key }) => ({ attempt, reason, status, key }))).toEqual([
      { attempt: 1, reason: 'status', status: 503, key: seen[0].key },
      { attempt: 2, reason: 'status', status: 503, key: seen[0].key },
    ]);
  });

  it('two calls get two keys: one key per logical call, not per client', async () => {
    const url = server.script('/charges-b', answer(201));
    const idempotentFetch = createIdempotentFetch(fast);
    await idempotentFetch(url, post());
    await idempotentFetch(url, post());
    const [first, second] = server.requestsTo('/charges-b');
    expect(first.key).not.toBe(second.key);
  });

  it('409 with Retry-After: 1 waits the second the server asked for, above maxDelay', async () => {
    const retries: RetryInfo[] = [];
    const url = server.script('/charges-c', answer(409, { 'retry-after': '1' }), answer(201));
    const response = await createIdempotentFetch({ ...fast, onRetry: (info) => retries.push(info) })(url, post());
    expect(response.status).toBe(201);
    const [first, second] = server.requestsTo('/charges-c');
    expect(retries[0].delayMs).toBe(1000);
    expect(second.at - first.at).toBeGreaterThanOrEqual(950);
    expect(second.key).toBe(first.key);
  });

  it('a Retry-After given as an HTTP date is honoured; one beyond 60 s returns the answer at once', async () => {
    const retries: RetryInfo[] = [];
    const soon = new Date(Date.now() + 1500).toUTCString();
    const dated = server.script('/charges-d', answer(503, { 'retry-after': soon }), answer(201));
    expect((await createIdempotentFetch({ ...fast, onRetry: (info) => retries.push(info) })(dated, post())).status).toBe(201);
    expect(retries[0].delayMs).toBeGreaterThan(0);
    expect(retries[0].delayMs).toBeLessThanOrEqual(1500);
    const far = server.script('/charges-e', answer(503, { 'retry-after': '120' }), answer(201));
    const response = await createIdempotentFetch(fast)(far, post());
    expect(response.status).toBe(503);
    expect(server.requestsTo('/charges-e')).toHaveLength(1);
  });

  it.each([400, 401, 403, 404, 422])('%i is an answer: one attempt, returned as is', async (status) => {
    const url = server.script(`/answer-${status}`, answer(status), answer(201));
    const response = await createIdempotentFetch(fast)(url, post());
    expect(response.status).toBe(status);
    expect(await response.json()).toEqual({ status });
    expect(server.requestsTo(`/answer-${status}`)).toHaveLength(1);
  });

  it('always 503: exactly maxAttempts attempts, and the last response returned with its body', async () => {
    const url = server.script('/charges-f', answer(503, {}, '{"last":true}'));
    const response = await createIdempotentFetch({ ...fast, maxAttempts: 4 })(url, post());
    expect(response.status).toBe(503);
    expect(await response.json()).toEqual({ last: true });
    expect(server.requestsTo('/charges-f')).toHaveLength(4);
  });

  it("keeps the caller's own key, whatever the header's case", async () => {
    const url = server.script('/charges-g', answer(503), answer(201));
    await createIdempotentFetch(fast)(url, { ...post(), headers: { 'content-type': 'application/json', 'idempotency-key': 'order-42' } });
    expect(server.requestsTo('/charges-g').map((request) => request.key)).toEqual(['order-42', 'order-42']);
  });

  it('GET (a method outside `methods`) is sent once, with no key, even on 503', async () => {
    const url = server.script('/balance', answer(503));
    const response = await createIdempotentFetch(fast)(url);
    expect(response.status).toBe(503);
    expect(server.requestsTo('/balance')).toEqual([expect.objectContaining({ method: 'GET', key: undefined })]);
  });

  it('a network error (the socket dies before the answer) is retried with the same key', async () => {
    const retries: RetryInfo[] = [];
    const url = server.script('/charges-h', hangUp, answer(201));
    const response = await createIdempotentFetch({ ...fast, onRetry: (info) => retries.push(info) })(url, post());
    expect(response.status).toBe(201);
    const [first, second] = server.requestsTo('/charges-h');
    expect(second.key).toBe(first.key);
    expect(retries[0].reason).toBe('network');
  });

  it('after the last attempt the last network error is thrown, as fetch would', async () => {
    const url = server.script('/charges-i', hangUp);
    await expect(createIdempotentFetch({ ...fast, maxAttempts: 2 })(url, post())).rejects.toMatchObject({
      name: 'TypeError',
      message: 'fetch failed',
    });
    expect(server.requestsTo('/charges-i')).toHaveLength(2);
  });

  it('a per-attempt timeout is retried with the same key', async () => {
    const retries: RetryInfo[] = [];
    const url = server.script('/charges-j', stall, answer(201));
    const response = await createIdempotentFetch({ ...fast, timeout: 300, onRetry: (info) => retries.push(info) })(url, post());
    expect(response.status).toBe(201);
    expect(retries.map((retry) => retry.reason)).toEqual(['timeout']);
    const [first, second] = server.requestsTo('/charges-j');
    expect(second.key).toBe(first.key);
  });

  it("the caller's aborted signal stops the retries at once", async () => {
    const controller = new AbortController();
    const url = server.script('/charges-k', answer(503, { 'retry-after': '30' }));
    const call = createIdempotentFetch({ ...fast, onRetry: () => controller.abort(new Error('caller gave up')) })(url, {
      ...post(),
      signal: controller.signal,
    });
    await expect(call).rejects.toThrow('caller gave up');
    expect(server.requestsTo('/charges-k')).toHaveLength(1);
  });

  it('a Request object is re-sent with its body on every attempt', async () => {
    const url = server.script('/charges-l', answer(502), answer(201));
    const response = await createIdempotentFetch(fast)(new Request(url, post({ amount: 9 })));
    expect(response.status).toBe(201);
    expect(server.requestsTo('/charges-l').map((request) => request.body)).toEqual(['{"amount":9}', '{"amount":9}']);
  });

  it('a ReadableStream body, which cannot be re-sent, is refused when retries are possible and sent with maxAttempts: 1', async () => {
    const url = server.script('/upload', answer(201));
    const stream = () =>
      new ReadableStream({
        start(controller) {
          controller.enqueue(new TextEncoder().encode('chunk'));
          controller.close();
        },
      });
    const streamed = (): RequestInit => ({ method: 'POST', body: stream(), duplex: 'half' }) as RequestInit;
    await expect(createIdempotentFetch(fast)(url, streamed())).rejects.toThrow(IdempotencyConfigurationError);
    expect(server.requestsTo('/upload')).toHaveLength(0);
    const once = await createIdempotentFetch({ maxAttempts: 1 })(url, streamed());
    expect(once.status).toBe(201);
    expect(server.requestsTo('/upload')).toEqual([expect.objectContaining({ body: 'chunk', key: expect.any(String) })]);
  });

  it('retryOn as a list replaces the statuses; as a function decides alone', async () => {
    const listed = server.script('/charges-m', answer(500), answer(201));
    expect((await createIdempotentFetch({ ...fast, retryOn: [503] })(listed, post())).status).toBe(500);
    const decided = server.script('/charges-n', answer(418), answer(201));
    const teapot = createIdempotentFetch({ ...fast, retryOn: ({ status }) => status === 418 });
    expect((await teapot(decided, post())).status).toBe(201);
  });

  it('the header option names the header sent', async () => {
    const seen: Headers[] = [];
    const idempotentFetch = createIdempotentFetch({
      header: 'X-Request-Key',
      fetch: async (request) => {
        seen.push((request as Request).headers);
        return new Response('{}', { status: 201 });
      },
    });
    await idempotentFetch('http://payments.invalid/charges', post());
    expect(seen[0].get('x-request-key')).toMatch(/^[0-9a-f-]{36}$/);
    expect(seen[0].get('idempotency-key')).toBeNull();
  });

  it.each([
    [{ maxAttempts: 0 }, 'maxAttempts'],
    [{ minDelay: -1 }, 'minDelay'],
    [{ maxDelay: 10, minDelay: 100 }, 'maxDelay'],
    [{ timeout: 1.5 }, 'timeout'],
    [{ header: 'bad header' }, 'header'],
    [{ retryOn: [99] }, 'retryOn'],
    [{ methods: 'POST' }, 'methods'],
  ])('refuses %p when the client is made, naming %s', (options, name) => {
    expect(() => createIdempotentFetch(options as never)).toThrow(IdempotencyConfigurationError);
    expect(() => createIdempotentFetch(options as never)).toThrow(name);
  });
});
