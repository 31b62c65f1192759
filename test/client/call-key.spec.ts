import { createIdempotentFetch } from '../../lib/client/index.js';
import { MemoryIdempotencyStore, makeIdempotent, step, stepKey } from '../../lib/index.js';
import { ScriptedServer, answer } from './scripted-server.js';

/**
 * The keys the client draws inside idempotent executions: the same on every attempt of
 * the same execution, so a handler run again after a failure reaches the downstream
 * service with the keys it used before.
 */
describe('createIdempotentFetch keys inside idempotent executions', () => {
  const server = new ScriptedServer();
  const store = new MemoryIdempotencyStore();
  const idempotentFetch = createIdempotentFetch({ minDelay: 1, maxDelay: 5 });
  const post = (path: string, amount: number) =>
    idempotentFetch(server.base + path, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ amount }),
    });

  beforeAll(async () => {
    await server.start();
    server.script('/charges', answer(201));
    server.script('/emails', answer(202));
  });
  afterAll(() => server.stop());

  const keysOf = (path: string, from: number) =>
    server
      .requestsTo(path)
      .slice(from)
      .map((request) => request.key);

  it('outside an execution every call draws a random UUID', async () => {
    const from = server.requestsTo('/charges').length;
    await post('/charges', 1);
    await post('/charges', 1);
    const [a, b] = keysOf('/charges', from);
    expect(a).toMatch(/^[0-9a-f-]{36}$/);
    expect(b).not.toBe(a);
  });

  it('outside steps: derived from the execution and the call order; a retry after a failure sends the same keys, another key others', async () => {
    let failNext = true;
    const pay = makeIdempotent(
      async (orderId: string) => {
        await post('/charges', 700);
        await post('/emails', 0);
        if (failNext) {
          failNext = false;
          throw new Error('crashed after both calls');
        }
        return orderId;
      },
      { store, key: (orderId) => orderId, scope: 'call-key-outside' },
    );
    const charges = server.requestsTo('/charges').length;
    const emails = server.requestsTo('/emails').length;
    await expect(pay('o-1')).rejects.toThrow('crashed after both calls');
    await expect(pay('o-1')).resolves.toBe('o-1');
    await pay('o-2');
    const [first, retry, other] = keysOf('/charges', charges);
    const [firstEmail, retryEmail, otherEmail] = keysOf('/emails', emails);
    expect(first).toMatch(/^call_[A-Za-z0-9_-]{43}$/);
    expect(retry).toBe(first);
    expect(retryEmail).toBe(firstEmail);
    expect(firstEmail).not.toBe(first);
    expect(other).not.toBe(first);
    expect(otherEmail).not.toBe(firstEmail);
  });

  it("inside a step: the step's key for its first call, a key derived from it for the next; a recorded step does not shift the keys after it", async () => {
    let failNext = true;
    const seenStepKeys: string[] = [];
    const pay = makeIdempotent(
      async (orderId: string) => {
        await step('charge', async () => {
          seenStepKeys.push(stepKey('charge'));
          await post('/charges', 700);
          await post('/charges', 701);
        });
        await post('/emails', 0);
        if (failNext) {
          failNext = false;
          throw new Error('crashed after the step');
        }
        return orderId;
      },
      { store, key: (orderId) => orderId, scope: 'call-key-steps' },
    );
    const charges = server.requestsTo('/charges').length;
    const emails = server.requestsTo('/emails').length;
    await expect(pay('o-3')).rejects.toThrow('crashed after the step');
    await expect(pay('o-3')).resolves.toBe('o-3');
    // The step ran once (the retry got its recorded result); the email call after it ran twice, with one key.
    const [chargeKey, secondChargeKey, ...more] = keysOf('/charges', charges);
    expect(more).toEqual([]);
    expect(chargeKey).toBe(seenStepKeys[0]);
    expect(secondChargeKey).toMatch(/^step-call_[A-Za-z0-9_-]{43}$/);
    const [email, emailRetry] = keysOf('/emails', emails);
    expect(email).toMatch(/^call_/);
    expect(emailRetry).toBe(email);
  });
});
