import { randomBytes } from 'node:crypto';
import { IdempotencyConfigurationError } from '../core/errors.js';
import { storageKeyOf } from '../core/hash.js';
import { MAX_KEY_LENGTH } from '../core/key.js';
import { checkWholeNumber } from '../core/options.js';
import { MemoryOneTimeTokenStore } from './memory-one-time-token.store.js';
import { OneTimeTokenInvalidError, OneTimeTokenUsedError } from './one-time-token.errors.js';
import type { OneTimeTokenConsumeResult, OneTimeTokenStore } from './one-time-token.store.js';

/** Options of `OneTimeTokenService`. */
export interface OneTimeTokenServiceOptions {
  /**
   * Where tokens live. Share one store (Redis) between every instance that issues or
   * accepts the tokens.
   * @default a process-local MemoryOneTimeTokenStore
   */
  store?: OneTimeTokenStore;
  /** How long an issued token stays valid, ms, unless `issue()` says otherwise. @default 900000 (15 min) */
  ttl?: number;
}

/** Options of `OneTimeTokenService.issue`. */
export interface IssueOneTimeTokenOptions {
  /** How long this token stays valid, ms. @default the service's `ttl` (15 min) */
  ttl?: number;
}

/** How long an issued one-time token stays valid by default, ms (15 minutes). */
export const DEFAULT_ONE_TIME_TOKEN_TTL = 15 * 60 * 1000;
/** Scope used when none is given, by `issue()` and by the guard alike. */
export const DEFAULT_ONE_TIME_TOKEN_SCOPE = 'default';

/**
 * "Get a token, then submit once": `issue()` hands out a random token for a scope (a
 * form, a payment page, a user), and `consume()` accepts it exactly once, atomically,
 * however many submissions race. The scope binds a token to one operation: a token
 * issued for `checkout:user-1` is unknown to `checkout:user-2`.
 *
 * @example
 * const token = await tokens.issue(`checkout:${user.id}`, { ttl: 10 * 60_000 });
 * // later, on submit:
 * if (!(await tokens.consume(`checkout:${user.id}`, submittedToken))) throw new ConflictException();
 */
export class OneTimeTokenService {
  readonly store: OneTimeTokenStore;
  readonly ttl: number;

  constructor(options: OneTimeTokenServiceOptions = {}) {
    this.store = options.store ?? new MemoryOneTimeTokenStore();
    checkWholeNumber('OneTimeTokenService', 'ttl', options.ttl, { unit: 'ms', example: '900_000' });
    this.ttl = options.ttl ?? DEFAULT_ONE_TIME_TOKEN_TTL;
  }

  /** A new token (43 URL-safe characters, 256 random bits) valid once within `scope`. */
  async issue(scope: string = DEFAULT_ONE_TIME_TOKEN_SCOPE, options: IssueOneTimeTokenOptions = {}): Promise<string> {
    checkWholeNumber('OneTimeTokenService.issue', 'ttl', options.ttl, { unit: 'ms', example: '600_000' });
    const ttl = options.ttl ?? this.ttl;
    for (let attempt = 0; attempt < 3; attempt++) {
      const token = randomBytes(32).toString('base64url');
      if (await this.store.save(this.keyOf(scope, token), ttl)) return token;
    }
    // Three collisions of 256 random bits mean the store answers false for everything.
    throw new Error('OneTimeTokenService.issue: the store refused three fresh tokens; check the OneTimeTokenStore implementation.');
  }

  /** Accepts the token once: true for exactly one call, false for every other (reused, unknown, expired). */
  async consume(scope: string, token: unknown): Promise<boolean> {
    return (await this.redeem(scope, token)) === 'consumed';
  }

  /**
   * Like `consume`, but explains a refusal: throws `OneTimeTokenUsedError` (409) for a
   * reused token and `OneTimeTokenInvalidError` (422) for an unknown one.
   */
  async consumeOrThrow(scope: string, token: unknown): Promise<void> {
    const result = await this.redeem(scope, token);
    if (result === 'already_used') throw new OneTimeTokenUsedError();
    if (result !== 'consumed') throw new OneTimeTokenInvalidError();
  }

  /** What consuming the token found, without throwing. */
  async redeem(scope: string, token: unknown): Promise<OneTimeTokenConsumeResult> {
    if (!isWellFormed(token)) return 'unknown';
    return this.store.consume(this.keyOf(scope, token));
  }

  /** Withdraws a token before use (e.g. the user cancelled); true when it existed. */
  async revoke(scope: string, token: string): Promise<boolean> {
    if (!isWellFormed(token)) return false;
    return this.store.revoke(this.keyOf(scope, token));
  }

  private keyOf(scope: string, token: string): string {
    if (typeof scope !== 'string') {
      throw new IdempotencyConfigurationError(
        `OneTimeTokenService: scope must be a string, got ${typeof scope}.`,
        'Pass the operation the token is for, e.g. `checkout:${user.id}`, or omit it for the default scope.',
      );
    }
    // Hashed: raw tokens never become store keys, and scopes cannot collide.
    return storageKeyOf('one-time-token:' + scope, token);
  }
}

function isWellFormed(token: unknown): token is string {
  return typeof token === 'string' && token.length > 0 && token.length <= MAX_KEY_LENGTH;
}
