import { MemoryIdempotencyStore, type OutboxBacklog } from '../../lib/index.js';
import { OutboxRelay, resolveRelayOptions } from '../../lib/core/outbox-relay.js';
import type { OutboxClaimRequest } from '../../lib/core/outbox-store.js';
import { IdempotencyConfigurationError } from '../../lib/core/errors.js';
import { waitFor } from '../messages/support.js';

/**
 * A memory store that counts the relay's rounds (claims) and its backlog reads; `waiting`
 * stands for messages its relay cannot send (a broker away), what the store reports then.
 */
class CountingStore extends MemoryIdempotencyStore {
  claims = 0;
  backlogReads = 0;
  waiting = 0;
  readonly stagedAt = Date.now();

  override claimOutbox(request: OutboxClaimRequest) {
    this.claims++;
    return super.claimOutbox(request);
  }

  override async outboxBacklog(): Promise<OutboxBacklog> {
    this.backlogReads++;
    await super.outboxBacklog();
    return this.waiting > 0 ? { pending: this.waiting, oldestStagedAt: this.stagedAt } : { pending: 0 };
  }
}

/**
 * The relay reads its store's backlog for the `outbox_backlog` event at most every
 * `backlogInterval`, however often its rounds run, and never when nobody listens.
 */
describe('the relay reading the outbox backlog', () => {
  const relays: OutboxRelay[] = [];
  afterEach(async () => {
    await Promise.all(relays.splice(0).map((relay) => relay.stop()));
  });

  const start = (store: CountingStore, report: ConstructorParameters<typeof OutboxRelay>[3], backlogInterval = 300) => {
    const relay = new OutboxRelay(store, async () => undefined, { pollInterval: 10, backlogInterval }, report);
    relays.push(relay);
    relay.start();
    return relay;
  };

  it('reads it at once, then at most every backlogInterval however often its rounds run, and never when nobody receives it', async () => {
    const store = new CountingStore();
    store.waiting = 1;
    const unheard = new CountingStore();
    const reported: { backlog: OutboxBacklog; readMs: number }[] = [];
    const startedAt = Date.now();
    start(store, { backlog: (backlog, readMs) => reported.push({ backlog, readMs }) });
    // Beside it, a relay without a backlog report, as the module starts it when no onEvent listener is set.
    start(unheard, {}, 1);
    await waitFor('the first read, at the first round', () => reported.length === 1);
    expect(reported[0]).toEqual({ backlog: { pending: 1, oldestStagedAt: store.stagedAt }, readMs: expect.any(Number) });
    await waitFor('40 rounds', () => store.claims >= 40);
    await waitFor('a second read', () => reported.length >= 2);
    const elapsed = Date.now() - startedAt;
    expect(store.backlogReads).toBe(reported.length);
    // One at the start, then one per 300 ms at most: far fewer than the rounds.
    expect(store.backlogReads).toBeLessThanOrEqual(1 + Math.floor(elapsed / 300));
    expect(store.backlogReads).toBeLessThan(store.claims / 5);
    expect(unheard.claims).toBeGreaterThanOrEqual(20);
    expect(unheard.backlogReads).toBe(0);
  });

  it('reports an empty backlog once, after something waited, and never for an outbox that stayed empty', async () => {
    const store = new CountingStore();
    store.waiting = 2;
    const reported: OutboxBacklog[] = [];
    start(store, { backlog: (backlog) => reported.push(backlog) }, 50);
    await waitFor('a backlog with something waiting', () => reported.length === 1);
    store.waiting = 0;
    await waitFor('the empty backlog after it', () => reported.length === 2);
    expect(reported).toEqual([{ pending: 2, oldestStagedAt: store.stagedAt }, { pending: 0 }]);
    const readsAfterEmpty = store.backlogReads;
    await waitFor('three more reads', () => store.backlogReads >= readsAfterEmpty + 3);
    expect(reported).toHaveLength(2);

    // An application that never emits: its relay reads, and reports nothing.
    const empty = new CountingStore();
    const nothing: OutboxBacklog[] = [];
    start(empty, { backlog: (backlog) => nothing.push(backlog) }, 50);
    await waitFor('three reads of an empty outbox', () => empty.backlogReads >= 3);
    expect(nothing).toEqual([]);
  });

  it('checks backlogInterval like its other durations', () => {
    expect(resolveRelayOptions('test').backlogInterval).toBe(10_000);
    expect(() => resolveRelayOptions('test', { backlogInterval: 0 })).toThrow(IdempotencyConfigurationError);
    expect(() => resolveRelayOptions('test', { backlogInterval: 1.5 })).toThrow(IdempotencyConfigurationError);
  });
});
