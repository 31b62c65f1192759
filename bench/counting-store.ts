import type { ClaimRequest, ClaimResult, CompleteRequest, IdempotencyRecord, IdempotencyStore } from '../lib/core/index.js';

/** Calls made to a store, by primitive. */
export interface StoreCallCounts {
  claim: number;
  complete: number;
  release: number;
  renew: number;
  get: number;
  delete: number;
}

export function emptyCounts(): StoreCallCounts {
  return { claim: 0, complete: 0, release: 0, renew: 0, get: 0, delete: 0 };
}

/**
 * Counts the store calls the engine really makes (round trips are counted, never
 * assumed). Methods return the inner promise as is: no extra `async` frame, so the
 * timed runs pay one integer increment per call and nothing else.
 */
export class CountingStore implements IdempotencyStore {
  readonly counts = emptyCounts();

  constructor(readonly inner: IdempotencyStore) {}

  claim(key: string, request: ClaimRequest): Promise<ClaimResult> {
    this.counts.claim++;
    return this.inner.claim(key, request);
  }

  complete(key: string, token: string, request: CompleteRequest): Promise<boolean> {
    this.counts.complete++;
    return this.inner.complete(key, token, request);
  }

  release(key: string, token: string): Promise<boolean> {
    this.counts.release++;
    return this.inner.release(key, token);
  }

  renew(key: string, token: string, leaseTtl: number): Promise<boolean> {
    this.counts.renew++;
    return this.inner.renew(key, token, leaseTtl);
  }

  get(key: string): Promise<IdempotencyRecord | undefined> {
    this.counts.get++;
    return this.inner.get(key);
  }

  delete(key: string): Promise<boolean> {
    this.counts.delete++;
    return this.inner.delete(key);
  }
}
