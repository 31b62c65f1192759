import type { ExecutionContext } from '@nestjs/common';
import type { PrincipalResult } from './principal.js';
import type { ResolvedHandlerConfig, TransportAdapter } from './transport.adapter.js';

type Principal = PrincipalResult;

/** How the protocol derives a request's key, scope and fingerprint (see the hooks of `IdempotencyRuntime`). */
export interface IdempotencyHooks {
  resolveKey(context: ExecutionContext, config: ResolvedHandlerConfig, adapter: TransportAdapter): unknown;
  resolveOperation(context: ExecutionContext, config: ResolvedHandlerConfig): string;
  resolvePrincipal(context: ExecutionContext, config: ResolvedHandlerConfig, adapter: TransportAdapter): Principal | Promise<Principal>;
  fingerprintMaterial(context: ExecutionContext, config: ResolvedHandlerConfig, adapter: TransportAdapter): unknown;
}
