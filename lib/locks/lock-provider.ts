import { IdempotencyConfigurationError } from '../core/errors.js';
import { checkWholeNumber } from '../core/options.js';

/** A lock held under a random token; only that token can extend or release it. */
export interface LockHandle {
  readonly resource: string;
  readonly token: string;
  /**
   * Epoch ms (this process's clock) when the lock lapses unless extended. Measured from
   * before the acquire call, so it never overstates how long the lock is held.
   */
  readonly expiresAt: number;
  /** Extends the lock to `ttl` ms from now; false when it was lost (expired, taken over). */
  extend(ttl?: number): Promise<boolean>;
  /** Releases the lock if this handle still holds it; never removes another holder's lock. */
  release(): Promise<boolean>;
}

/** Options of `LockProvider.acquire`. */
export interface AcquireLockOptions {
  /** How long the lock lasts unless extended, ms. */
  ttl: number;
}

/**
 * A mutual-exclusion primitive with expiry. `acquire` makes one attempt and resolves
 * `undefined` when another holder has the lock; waiting, renewal and release belong to
 * `withLock()`.
 */
export interface LockProvider {
  acquire(resource: string, options: AcquireLockOptions): Promise<LockHandle | undefined>;
}

/** The operations a provider implements for `TokenLockHandle`: compare-and-set on the token. */
export interface TokenLockOperations {
  extend(resource: string, token: string, ttl: number): Promise<boolean>;
  release(resource: string, token: string): Promise<boolean>;
}

/** A `LockHandle` over a provider's token compare-and-set operations. */
export class TokenLockHandle implements LockHandle {
  private expiry: number;

  constructor(
    readonly resource: string,
    readonly token: string,
    expiresAt: number,
    private readonly ttl: number,
    private readonly operations: TokenLockOperations,
  ) {
    this.expiry = expiresAt;
  }

  get expiresAt(): number {
    return this.expiry;
  }

  async extend(ttl: number = this.ttl): Promise<boolean> {
    const startedAt = Date.now();
    const extended = await this.operations.extend(this.resource, this.token, ttl);
    if (extended) this.expiry = startedAt + ttl;
    return extended;
  }

  release(): Promise<boolean> {
    return this.operations.release(this.resource, this.token);
  }
}

/** Validates the arguments of `acquire` (every provider, so a custom one can too). */
export function checkLockArguments(resource: string, ttl: number, owner: string): void {
  if (typeof resource !== 'string' || resource.length === 0) {
    throw new IdempotencyConfigurationError(
      `${owner}: resource must be a non-empty string, got ${JSON.stringify(resource)}.`,
      'Name what the lock guards, e.g. `inventory:${sku}`.',
    );
  }
  // Required here, unlike an option: a provider has no default lifetime to fall back on.
  if (ttl === undefined) {
    throw new IdempotencyConfigurationError(
      `${owner}: ttl is required.`,
      'Pass { ttl: 10_000 } (ms), or use withLock(), which defaults it.',
    );
  }
  checkWholeNumber(owner, 'ttl', ttl, { unit: 'ms', example: '10_000' });
}
