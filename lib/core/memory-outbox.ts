import type { ClaimedOutbox, OutboxBacklog, OutboxClaimRequest, OutboxSettlement, StagedOutbox } from './outbox-store.js';

/** One execution's messages in the memory store's outbox. */
interface MemoryOutboxEntry {
  readonly id: string;
  readonly messages: string;
  readonly count: number;
  readonly stagedAt: number;
  next: number;
  attempts: number;
  availableAt: number;
  owner: string | undefined;
  claimedUntil: number;
  lastError: string | undefined;
}

/**
 * The memory store's outbox: the executions whose messages are not all sent, in staging
 * order, in this process (so it protects what one process staged, and is lost with it,
 * like the memory store's records). Sent executions are dropped at once.
 */
export class MemoryOutbox {
  private readonly entries = new Map<string, MemoryOutboxEntry>();

  /** Executions with messages left to send. */
  get size(): number {
    return this.entries.size;
  }

  stage(staged: StagedOutbox, now: number): void {
    if (this.entries.has(staged.id)) return;
    this.entries.set(staged.id, {
      id: staged.id,
      messages: staged.messages,
      count: staged.count,
      stagedAt: now,
      next: 0,
      attempts: 0,
      availableAt: now,
      owner: undefined,
      claimedUntil: 0,
      lastError: undefined,
    });
  }

  claim(request: OutboxClaimRequest, now: number): ClaimedOutbox[] {
    const claimed: ClaimedOutbox[] = [];
    for (const entry of this.entries.values()) {
      if (claimed.length >= request.limit) break;
      if (entry.claimedUntil > now || entry.availableAt > now) continue;
      entry.owner = request.owner;
      entry.claimedUntil = now + request.claimTtl;
      claimed.push({ id: entry.id, messages: entry.messages, next: entry.next, attempts: entry.attempts, stagedAt: entry.stagedAt });
    }
    return claimed;
  }

  settle(id: string, owner: string, settlement: OutboxSettlement, now: number): boolean {
    const entry = this.entries.get(id);
    // Another relay claimed it after this one's claim ran out: the newer claim decides.
    if (!entry || entry.owner !== owner) return false;
    entry.next = Math.max(entry.next, settlement.next);
    if (entry.next >= entry.count) {
      this.entries.delete(id);
      return true;
    }
    entry.attempts++;
    entry.owner = undefined;
    entry.claimedUntil = 0;
    entry.availableAt = settlement.retryAt ?? now;
    entry.lastError = settlement.error;
    return true;
  }

  backlog(): OutboxBacklog {
    const oldest = this.entries.values().next();
    return oldest.done ? { pending: 0 } : { pending: this.entries.size, oldestStagedAt: oldest.value.stagedAt };
  }

  clear(): void {
    this.entries.clear();
  }
}
