import type { LoggerService } from '@nestjs/common';
import type { IdempotencyEventListener } from '../core/index.js';
import type { OutboxRelayOptions } from '../core/outbox-relay.js';
import type { IdempotentOptions } from './idempotency.options.js';

/**
 * The `runtime` option: a class that extends `IdempotencyRuntime`, built by the module
 * with its `IdempotencyService`. Typed by its shape rather than by name, because the
 * runtime's constructor takes the service and the service holds these options: naming
 * both here would tie the three in a circle. The module checks at boot that it extends
 * `IdempotencyRuntime`, and refuses the application otherwise.
 */
export type IdempotencyRuntimeClass = new (...args: never[]) => object;

/** Options of `IdempotencyModule.forRoot()`: defaults for every `@Idempotent()` handler. */
export interface IdempotencyModuleOptions extends IdempotentOptions {
  /**
   * Receives every outcome (claimed, replayed, conflicts, store errors) with timings and
   * hashed keys. A list feeds several listeners (each isolated from the others' errors):
   * e.g. `[createIdempotencyLogger(), createPrometheusListener()]`. See docs/observability.md.
   * @default none
   */
  onEvent?: IdempotencyEventListener | readonly IdempotencyEventListener[];
  /**
   * False turns every `@Idempotent()` into a pass-through (handy in unit tests; see
   * `IdempotencyTestingModule`).
   * @default true
   */
  enabled?: boolean;
  /**
   * Where the library writes what it refused or lost: store errors and outages, fail-open
   * runs, lost leases and memory-store evictions (`warn`, each cause at most once per
   * 10 s) and configuration errors (`error`). Nothing per request at `log` level; keys
   * appear hashed. Pass any Nest `LoggerService`, or `false` to write nothing (events
   * still reach `onEvent`). For a line per event, add `createIdempotencyLogger()` to `onEvent`.
   * @default new Logger('Idempotency')
   */
  logger?: LoggerService | false;
  /**
   * What a client reads of a configuration error found while serving a request (a user
   * object the scope cannot read, options a handler's transport cannot serve): by default a
   * 500 `IDEMPOTENCY_CONFIGURATION_ERROR` with a generic detail, the details (classes,
   * options, the fix) going to `logger` only, as they describe the server. True sends them in
   * the answer as well (a development set-up). Client errors (400, 409, 422) always explain
   * themselves.
   * @default false
   */
  exposeConfigurationErrors?: boolean;
  /**
   * A subclass of `IdempotencyRuntime` whose hooks (`resolveKey`, `resolveOperation`,
   * `resolvePrincipal`, `fingerprintMaterial`) derive keys, scopes and fingerprints your
   * own way, for every `@Idempotent()` handler of the module.
   * @default IdempotencyRuntime
   */
  runtime?: IdempotencyRuntimeClass;
  /**
   * Documents every `@Idempotent()` HTTP route in the OpenAPI document that
   * `@nestjs/swagger`'s `SwaggerModule.createDocument()` builds: the key's header, the
   * 400 / 409 / 422 / 503 answers with their problem bodies, `Idempotent-Replayed` on the
   * success responses and an `x-idempotent` extension, with no call of your own. Your
   * own `@ApiHeader()` / `@ApiResponse()` for the same header or status win. False leaves
   * the document as your decorators describe it. Without `@nestjs/swagger` installed it
   * does nothing (the library never loads it). See docs/openapi.md.
   * @default true
   */
  openApi?: boolean;
  /**
   * Tunes the relay that sends what `IdempotencyOutbox.emit()` staged (batch size, polling,
   * back-off, claims): it runs in every instance of the application, with nothing to turn
   * on. See docs/outbox.md.
   * @default { batchSize: 100, pollInterval: 1000, retryDelay: 500, maxRetryDelay: 30000, claimTtl: 30000, sendTimeout: 10000, retention: 86400000 }
   */
  outbox?: OutboxRelayOptions;
}
