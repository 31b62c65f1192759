import { MemoryIdempotencyStore, type OutboxBacklog } from '../../lib/index.js';
import { OutboxRelay, resolveRelayOptions } from '../../lib/core/outbox-relay.js';
import type { OutboxClaimRequest } from '../../lib/core/outbox-store.js';
import { IdempotencyConfigurationError } from '../../lib/core/errors.js';
import { waitFor } from '../messages/support.js';

/** A memory store that counts the relay's rounds (claims) and its backlog reads. */
class CountingStore extends MemoryIdempotencyStore {
  claims = 0;
  backlogReads = 0;

  override claimOutbox(request: OutboxClaimRequest) {
    this.claims++;
    return super.claimOutbox(request);
  }

  override outboxBacklog(): Promise<OutboxBacklog> {
    this.backlogReads++;
    return super.outboxBacklog();
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
    const unheard = new CountingStore();
    const reported: { backlog: OutboxBacklog; readMs: number }[] = [];
    const startedAt = Date.now();
    start(store, { backlog: (backlog, readMs) => reported.push({ backlog, readMs }) });
    // Beside it, a relay without a backlog report, as the module starts it when no onEvent listener is set.
    start(unheard, {}, 1);
    await waitFor('the first read, at the first round', () => reported.length === 1);
    expect(reported[0]).toEqual({ backlog: { pending: 0 }, readMs: expect.any(Number) });
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

  it('checks backlogInterval like its other durations', () => {
    expect(resolveRelayOptions('test').backlogInterval).toBe(10_000);
    expect(() => resolveRelayOptions('test', { backlogInterval: 0 })).toThrow(IdempotencyConfigurationError);
    expect(() => resolveRelayOptions('test', { backlogInterval: 1.5 })).toThrow(IdempotencyConfigurationError);
  });
});
