import {
  IdempotencyConfigurationError,
  IdempotencyStoreUnavailableError,
  MemoryIdempotencyStore,
  makeIdempotent,
  type IdempotencyStore,
} from '../../lib/index.js';
import { stageOutboxMessage } from '../../lib/core/outbox.js';
import { OutboxRelay, type OutboxRelayOptions } from '../../lib/core/outbox-relay.js';
import type { IdempotencyOutboxStore, OutboxMessage } from '../../lib/core/outbox-store.js';
import { waitFor } from '../messages/support.js';

/**
 * The outbox's core on the memory store (issue 44): a message staged inside an execution
 * leaves only after its record completed, in order, once per relay claim; a failed handler
 * and a replay send nothing; two relays never send one message at once.
 */

class Sent {
  readonly messages: OutboxMessage[] = [];
  readonly attempts: OutboxMessage[] = [];
  failNext = new Map<string, number>();
  readonly send = async (message: OutboxMessage): Promise<void> => {
    this.attempts.push(message);
    const data = message.data as { tag?: string };
    const failures = this.failNext.get(data?.tag ?? '') ?? 0;
    if (failures > 0) {
      this.failNext.set(data.tag!, failures - 1);
      throw new Error('broker away');
    }
    this.messages.push(message);
  };
  tags(): string[] {
    return this.messages.map((message) => (message.data as { tag: string }).tag);
  }
}

const relays: OutboxRelay[] = [];
function relayOn(store: IdempotencyStore & IdempotencyOutboxStore, sent: Sent, options: OutboxRelayOptions = {}): OutboxRelay {
  const relay = new OutboxRelay(store, sent.send, { pollInterval: 20, retryDelay: 10, maxRetryDelay: 40, ...options });
  relays.push(relay);
  relay.start();
  return relay;
}
afterEach(async () => {
  await Promise.all(relays.splice(0).map((relay) => relay.stop()));
});

function emit(tag: string, client = 'EVENTS'): OutboxMessage {
  return stageOutboxMessage(client, 'refund.completed', { tag }).message;
}

describe('the outbox on the memory store', () => {
  it('refuses a message outside an execution, saying where to call it', () => {
    expect(() => emit('lost')).toThrow(IdempotencyConfigurationError);
    expect(() => emit('lost')).toThrow(/outside an idempotent execution/);
  });

  it('refuses a store without an outbox', async () => {
    const memory = new MemoryIdempotencyStore();
    const bare: IdempotencyStore = {
      claim: (k, r) => memory.claim(k, r),
      complete: (k, t, r) => memory.complete(k, t, r),
      release: (k, t) => memory.release(k, t),
      renew: (k, t, l) => memory.renew(k, t, l),
      get: (k) => memory.get(k),
      delete: (k) => memory.delete(k),
    };
    const run = makeIdempotent(async () => emit('x'), { store: bare, key: () => 'k', scope: 'bare' });
    await expect(run()).rejects.toThrow(/store without an outbox/);
  });

  it('refuses a message in a run through a store outage (fail-open): no record to stage it with', async () => {
    const memory = new MemoryIdempotencyStore();
    const down = Object.assign(Object.create(memory) as MemoryIdempotencyStore, {
      claim: async () => {
        throw new Error('store down');
      },
    });
    const run = makeIdempotent(async () => emit('unprotected'), {
      store: down,
      key: () => 'k',
      scope: 'outage',
      onStoreError: 'fail-open',
    });
    await expect(run()).rejects.toThrow(IdempotencyStoreUnavailableError);
    await expect(run()).rejects.toThrow(/without protection through a store outage/);
  });

  it('sends only after the record completed, in staging order, each with an id of its execution and position', async () => {
    const store = new MemoryIdempotencyStore();
    const sent = new Sent();
    relayOn(store, sent);
    let backlogInside: number | undefined;
    const refund = makeIdempotent(
      async (id: string) => {
        const ids = [emit(`${id}:1`).id, emit(`${id}:2`).id, emit(`${id}:3`).id];
        // Staged with the execution, not in the store yet: nothing can leave before the completion.
        backlogInside = (await store.outboxBacklog()).pending;
        return ids;
      },
      { store, key: (id) => id, scope: 'refund' },
    );
    const ids = await refund('r1');
    expect(backlogInside).toBe(0);
    await waitFor('three messages', () => sent.messages.length === 3, 5_000);
    expect(sent.tags()).toEqual(['r1:1', 'r1:2', 'r1:3']);
    expect(sent.messages.map((message) => message.id)).toEqual(ids);
    expect(new Set(ids).size).toBe(3);
    for (const id of ids) expect(id).toMatch(/^msg_[A-Za-z0-9_-]{43}$/);
    expect(sent.messages[0]).toMatchObject({ client: 'EVENTS', pattern: 'refund.completed' });
    expect((await store.outboxBacklog()).pending).toBe(0);
  });

  it('sends nothing for a handler that throws, nor for a replay', async () => {
    const store = new MemoryIdempotencyStore();
    const sent = new Sent();
    relayOn(store, sent);
    const refund = makeIdempotent(
      async (id: string, fail: boolean) => {
        emit(id);
        if (fail) throw new Error('declined');
        return id;
      },
      { store, key: (id) => id, scope: 'refund' },
    );
    await expect(refund('failed', true)).rejects.toThrow('declined');
    await refund('once', false);
    await refund('once', false); // a replay: the handler does not run
    // A later execution's message: the relay sends in staging order, so all before it are out.
    await refund('sentinel', false);
    await waitFor('the sentinel', () => sent.tags().includes('sentinel'), 5_000);
    expect(sent.tags()).toEqual(['once', 'sentinel']);
  });

  it('retries a failed send with back-off, with the same id, and keeps the execution in order', async () => {
    const store = new MemoryIdempotencyStore();
    const sent = new Sent();
    sent.failNext.set('b', 3);
    relayOn(store, sent);
    const run = makeIdempotent(
      async () => {
        emit('a');
        emit('b');
        emit('c');
      },
      { store, key: () => 'k', scope: 'ordered' },
    );
    await run();
    await waitFor('a, b and c', () => sent.messages.length === 3, 5_000);
    expect(sent.tags()).toEqual(['a', 'b', 'c']);
    const tries = sent.attempts.filter((message) => (message.data as { tag: string }).tag === 'b');
    expect(tries).toHaveLength(4);
    expect(new Set(tries.map((message) => message.id)).size).toBe(1);
    // 'a' was confirmed before 'b' failed: the retries start from 'b'.
    expect(sent.attempts.filter((message) => (message.data as { tag: string }).tag === 'a')).toHaveLength(1);
  });

  it('two relays on one store never send one message at once, and send each once', async () => {
    const store = new MemoryIdempotencyStore();
    const inFlight = new Set<string>();
    const overlaps: string[] = [];
    const byRelay = [new Sent(), new Sent()];
    for (const sent of byRelay) {
      const send = sent.send;
      relayOn(
        store,
        Object.assign(sent, {
          send: async (message: OutboxMessage) => {
            if (inFlight.has(message.id)) overlaps.push(message.id);
            inFlight.add(message.id);
            await new Promise((resolve) => setImmediate(resolve));
            inFlight.delete(message.id);
            await send(message);
          },
        }),
        { batchSize: 3 },
      );
    }
    const run = makeIdempotent(
      async (n: number) => {
        emit(`${n}:0`);
        emit(`${n}:1`);
      },
      { store, key: (n) => String(n), scope: 'many' },
    );
    await Promise.all(Array.from({ length: 40 }, (_, n) => run(n)));
    const all = (): string[] => byRelay.flatMap((sent) => sent.tags());
    await waitFor('80 messages', () => all().length === 80, 5_000);
    expect(overlaps).toEqual([]);
    expect(new Set(all()).size).toBe(80);
    for (const sent of byRelay) {
      const tags = sent.tags();
      for (let n = 0; n < 40; n++) {
        const first = tags.indexOf(`${n}:0`);
        const second = tags.indexOf(`${n}:1`);
        if (second >= 0) expect(first).toBeGreaterThanOrEqual(0);
        if (second >= 0) expect(first).toBeLessThan(second);
      }
    }
    expect(byRelay.every((sent) => sent.messages.length > 0)).toBe(true);
  });

  it('takes over what a relay that died claimed, once its claim ran out', async () => {
    const store = new MemoryIdempotencyStore();
    const run = makeIdempotent(async () => void emit('orphan'), { store, key: () => 'k', scope: 'orphan' });
    await run();
    // A relay claims and dies before sending (its process is gone: nothing settles the claim).
    const [claimed] = await store.claimOutbox({ owner: 'dead', limit: 10, claimTtl: 300 });
    expect(claimed).toBeDefined();
    const diedAt = Date.now();
    const sent = new Sent();
    relayOn(store, sent);
    await waitFor('the orphan', () => sent.messages.length === 1, 5_000);
    expect(Date.now() - diedAt).toBeGreaterThanOrEqual(250);
    expect(await store.settleOutbox(claimed!.id, 'dead', { next: 1 })).toBe(false);
  });
});
