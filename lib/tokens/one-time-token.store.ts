/** What consuming a token found. */
export type OneTimeTokenConsumeResult =
  /** The token was unused: it is now used, and this caller is the only one that got this answer. */
  | 'consumed'
  /** The token was issued and already used (a double submit). */
  | 'already_used'
  /** No such token: never issued, expired, revoked, or issued for another scope. */
  | 'unknown';

/**
 * Persistence of one-time tokens. Keys are handed in already hashed and scoped by
 * `OneTimeTokenService` (`[A-Za-z0-9_-]` only); raw tokens never reach a store.
 *
 * A used token is kept as "used" until its ttl ends, so that a second submission can be
 * told apart (`already_used`, 409) from a forged or expired one (`unknown`, 422).
 */
export interface OneTimeTokenStore {
  /** Saves an unused token for `ttl` ms. Resolves false (and changes nothing) when the key exists. */
  save(key: string, ttl: number): Promise<boolean>;
  /** Marks the token used in one atomic step: of any number of concurrent calls, exactly one gets `consumed`. */
  consume(key: string): Promise<OneTimeTokenConsumeResult>;
  /** Forgets the token, used or not; true when there was one. */
  revoke(key: string): Promise<boolean>;
  /** Optional readiness probe for health checks. */
  ping?(): Promise<void>;
}

/** Injection token for the store, same name as the interface. */
export const OneTimeTokenStore = Symbol.for('nestjs-idempotency:OneTimeTokenStore');
