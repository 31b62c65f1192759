import { LuaScript, RedisOperationTimeoutError, RedisScriptRunner, type RedisClientLike } from '../../lib/redis/redis-client';

/** A client whose replies the test releases by hand. */
function manualClient() {
  const pending: Array<{ resolve: (value: unknown) => void; reject: (error: unknown) => void; command: string }> = [];
  const call = (command: string) => () =>
    new Promise<unknown>((resolve, reject) => {
      pending.push({ resolve, reject, command });
    });
  const client: RedisClientLike = { eval: call('eval'), evalsha: call('evalsha'), ping: call('ping') };
  return { client, pending };
}

const SCRIPT = new LuaScript('probe', "return redis.call('GET', KEYS[1])");

// The runner keeps every call's deadline on one timer (calls expire in the order they were made).
describe('RedisScriptRunner deadlines', () => {
  // Fake clocks: the deadlines are asserted at exact times, never raced against a loaded machine.
  beforeEach(() => jest.useFakeTimers({ doNotFake: ['setImmediate', 'nextTick', 'queueMicrotask'] }));
  afterEach(() => jest.useRealTimers());

  it('rejects each unanswered call at its own deadline, and answered calls never', async () => {
    const { client, pending } = manualClient();
    const runner = new RedisScriptRunner(client, { timeout: 80 }, 'Probe');
    const first = runner.run(SCRIPT, 'a', []);
    let firstSettled = false;
    first.catch(() => undefined).finally(() => (firstSettled = true));
    await jest.advanceTimersByTimeAsync(40);
    const second = runner.run(SCRIPT, 'b', []);
    const third = runner.run(SCRIPT, 'c', []);
    pending[2].resolve('answered');
    await expect(third).resolves.toBe('answered');
    let secondSettled = false;
    second.catch(() => undefined).finally(() => (secondSettled = true));
    await jest.advanceTimersByTimeAsync(39);
    expect(firstSettled).toBe(false);
    await jest.advanceTimersByTimeAsync(1);
    await expect(first).rejects.toBeInstanceOf(RedisOperationTimeoutError);
    // The second call was made later: the first one's deadline is not its own.
    await jest.advanceTimersByTimeAsync(39);
    expect(secondSettled).toBe(false);
    await jest.advanceTimersByTimeAsync(1);
    await expect(second).rejects.toThrow('Redis did not answer Probe.probe within 80 ms');
    // A reply after the deadline changes nothing.
    pending[0].resolve('late');
    await expect(first).rejects.toBeInstanceOf(RedisOperationTimeoutError);
  });

  it('sends no EVAL fallback for a NOSCRIPT reply that arrives after the deadline', async () => {
    const { client, pending } = manualClient();
    const runner = new RedisScriptRunner(client, { timeout: 30 }, 'Probe');
    // The first call sends EVAL and caches the script; answer it so later calls use EVALSHA.
    const warm = runner.run(SCRIPT, 'a', []);
    pending[0].resolve('ok');
    await warm;
    const call = runner.run(SCRIPT, 'a', []);
    expect(pending[1].command).toBe('evalsha');
    const rejected = expect(call).rejects.toBeInstanceOf(RedisOperationTimeoutError);
    await jest.advanceTimersByTimeAsync(30);
    await rejected;
    pending[1].reject(new Error('NOSCRIPT No matching script.'));
    await jest.advanceTimersByTimeAsync(1_000);
    expect(pending).toHaveLength(2);
  });

  it('falls back to EVAL once on NOSCRIPT within the deadline', async () => {
    const { client, pending } = manualClient();
    const runner = new RedisScriptRunner(client, { timeout: 1_000 }, 'Probe');
    const warm = runner.run(SCRIPT, 'a', []);
    pending[0].resolve('ok');
    await warm;
    const call = runner.run(SCRIPT, 'a', []);
    pending[1].reject(new Error('NOSCRIPT No matching script.'));
    await new Promise((r) => setImmediate(r));
    expect(pending[2].command).toBe('eval');
    pending[2].resolve('again');
    await expect(call).resolves.toBe('again');
  });

  it('rejects a call whose client throws instead of rejecting, with or without a timeout', async () => {
    const throwing: RedisClientLike = {
      eval: () => {
        throw new Error('Connection is closed.');
      },
      evalsha: () => {
        throw new Error('Connection is closed.');
      },
      ping: () => {
        throw new Error('Connection is closed.');
      },
    };
    for (const timeout of [0, 1_000]) {
      const runner = new RedisScriptRunner(throwing, { timeout }, 'Probe');
      await expect(runner.run(SCRIPT, 'a', [])).rejects.toThrow('Connection is closed.');
      await expect(runner.ping()).rejects.toThrow('Connection is closed.');
    }
  });
});
