import { Logger, type ExecutionContext } from '@nestjs/common';
import { IdempotencyConfigurationError, isIdempotencyError, type IdempotencyError } from '../core/index.js';
import type { TransportAdapter } from './transport.adapter.js';
import { requestTransportOf } from './transports/registry.js';

/** What a refusal is reported to: the module's log (`IdempotencyService`). */
interface ConfigurationReports {
  reportConfigurationError(where: string, error: IdempotencyError): void;
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
 * transport's form of `IDEMPOTENCY_CONFIGURATION_ERROR` (a problem body on HTTP), and
 * an error log line that says what to fix. Never Nest's bare "Internal server error".
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
  return adapter ? adapter.toTransportError(context, error) : error;
}

/**
 * A request reached an `@Idempotent()` handler in an application without IdempotencyModule
 * (Nest gives no boot hook to catch that): refused with `IDEMPOTENCY_CONFIGURATION_ERROR`.
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
