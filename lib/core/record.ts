/**
 * The persisted state of one idempotency key. Every timestamp is epoch milliseconds.
 *
 * `in_progress` is a lease: the worker holding `leaseToken` owns the key until
 * `leaseExpiresAt`, and must renew before then. Once the lease runs out the key is
 * claimable again (the owner crashed or hung), so an in-progress record is never a
 * permanent lock.
 */
export interface InProgressRecord {
  readonly status: 'in_progress';
  readonly key: string;
  readonly leaseToken: string;
  readonly leaseExpiresAt: number;
  /** SHA-256 of the canonical request, when fingerprinting is on. */
  readonly fingerprint?: string;
}

/**
 * A finished execution whose outcome is replayed to every duplicate until `expiresAt`.
 * `result` is an opaque string produced by the core (see `outcome.ts`): stores never
 * look inside it.
 */
export interface CompletedRecord {
  readonly status: 'completed';
  readonly key: string;
  readonly result: string;
  readonly expiresAt: number;
  readonly fingerprint?: string;
  /**
   * Token of the lease that completed the record, when the store keeps it. Such a store
   * answers a repeated `complete` under this token with `true`, so a retried complete
   * whose first reply was lost is told apart from a lost lease.
   */
  readonly leaseToken?: string;
}

/** A live record: a running lease (`in_progress`) or a stored result (`completed`). */
export type IdempotencyRecord = InProgressRecord | CompletedRecord;

/** The answer of `IdempotencyStore.claim`: the key is now ours, or the record that holds it. */
export type ClaimResult =
  /** The caller now owns the key under `record.leaseToken`. */
  | { readonly claimed: true; readonly record: InProgressRecord }
  /** Someone else owns it (`in_progress`) or it already finished (`completed`). */
  | { readonly claimed: false; readonly record: IdempotencyRecord };
