import { Logger, type ExecutionContext } from '@nestjs/common';
import { IdempotencyConfigurationError, IdempotencyErrorCode, isIdempotencyError, type IdempotencyError } from '../core/index.js';
import type { TransportAdapter } from './transport.adapter.js';
import { requestTransportOf } from './transports/registry.js';

/** What a refusal is reported to: the module's log (`IdempotencyService`), and whether its clients may read it. */
interface ConfigurationReports {
  readonly options: { readonly exposeConfigurationErrors?: boolean };
  reportConfigurationError(where: string, error: IdempotencyError): void;
}

/**
 * What a caller is told of `error`. A configuration error is the server's own mistake, and
 * its text names classes, options and module wiring: it goes to the server's log (the
 * caller of this function has logged it), and the caller gets the class of failure only,
 * `IDEMPOTENCY_CONFIGURATION_ERROR` with a generic detail, unless the application opts in
 * with `exposeConfigurationErrors: true`. Every other error (400, 409, 422, 503...) is
 * the caller's to read, and is returned as it is.
 */
export function publicErrorOf(error: IdempotencyError, exposeConfigurationErrors: boolean | undefined): IdempotencyError {
  if (exposeConfigurationErrors === true || error.code !== IdempotencyErrorCode.Configuration) return error;
  return new IdempotencyConfigurationError(
    'The server cannot serve this request idempotently: its idempotency configuration is wrong.',
    'The details are in the server log.',
    { cause: error },
  );
}

/** Raised when `@Idempotent()` runs in an application that has no IdempotencyModule. */
export function missingModuleError(context: ExecutionContext): IdempotencyConfigurationError {
  return new IdempotencyConfigurationError(
    `@Idempotent() on ${context.getClass().name}.${context.getHandler().name} cannot find IdempotencyModule.`,
    'Import IdempotencyModule.forRoot({ isGlobal: true }) in your root module, or import IdempotencyModule into the module that declares this controller.',
  );
}

/**
 * The answer to a request that reaches an `@Idempotent()` handler the library cannot
 * serve as configured (no IdempotencyModule, invalid options found only now): the
 * transport's form of `IDEMPOTENCY_CONFIGURATION_ERROR` (a problem body on HTTP, its
 * detail generic unless `exposeConfigurationErrors`), and an error log line that says what
 * to fix. Never Nest's bare "Internal server error".
 */
export function refuseUnconfigured(
  context: ExecutionContext,
  adapter: TransportAdapter | undefined,
  error: unknown,
  service?: ConfigurationReports,
): unknown {
  if (!isIdempotencyError(error)) return error;
  const where = `${context.getClass().name}.${context.getHandler().name}`;
  if (service) service.reportConfigurationError(where, error);
  else reportWithoutModule(where, error);
  const answer = publicErrorOf(error, service?.options.exposeConfigurationErrors);
  return adapter ? adapter.toTransportError(context, answer) : answer;
}

/**
 * A request reached an `@Idempotent()` handler in an application without IdempotencyModule
 * (an instance app.init() did not check: boot-check.ts): refused with
 * `IDEMPOTENCY_CONFIGURATION_ERROR`.
 */
export async function refuseWithoutModule(context: ExecutionContext): Promise<never> {
  const type = context.getType();
  // HTTP and messages get their transport's form; a GraphQL field the error itself, as before the transport registry.
  const adapter = type === 'http' || type === 'rpc' ? requestTransportOf(type) : undefined;
  if (adapter?.prepareErrors) await adapter.prepareErrors();
  throw refuseUnconfigured(context, adapter, missingModuleError(context));
}

/** Without the module there is no configured logger: Nest's, once per handler. */
const reportedWithoutModule = new Set<string>();
function reportWithoutModule(where: string, error: IdempotencyError): void {
  if (reportedWithoutModule.has(where)) return;
  reportedWithoutModule.add(where);
  new Logger('Idempotency').error(`${error.code}: ${error.message}`);
}
