/**
 * `nestjs-idempotency/tokens`: one-time tokens for forms and double submissions. A
 * token is issued with the page, consumed atomically by the submission, and a second
 * submission with it is refused (409). Redis-backed store: `nestjs-idempotency/redis`.
 */
export { OneTimeTokenModule, type OneTimeTokenModuleOptions, type OneTimeTokenModuleAsyncOptions } from './one-time-token.module.js';
export {
  OneTimeTokenService,
  DEFAULT_ONE_TIME_TOKEN_TTL,
  type OneTimeTokenServiceOptions,
  type IssueOneTimeTokenOptions,
} from './one-time-token.service.js';
export { RequireOneTimeToken, OneTimeTokenGuard, type RequireOneTimeTokenOptions } from './one-time-token.guard.js';
export { OneTimeTokenStore, type OneTimeTokenConsumeResult } from './one-time-token.store.js';
export { MemoryOneTimeTokenStore, type MemoryOneTimeTokenStoreOptions } from './memory-one-time-token.store.js';
export { OneTimeTokenMissingError, OneTimeTokenUsedError, OneTimeTokenInvalidError } from './one-time-token.errors.js';
