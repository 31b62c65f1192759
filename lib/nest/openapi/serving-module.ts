import { IDEMPOTENCY_RUNTIME } from '../idempotency.constants.js';
import type { NestModuleRef } from '../provider-instances.js';

/**
 * The IdempotencyModule whose runtime the providers and controllers of `host` get, found
 * as Nest's injector finds a dependency (the module's own providers, then its imports,
 * global ones among them, and what they re-export); undefined when there is none. The
 * module rather than the runtime (as `runtimeReachableFrom` answers): this runs while the
 * application is created, when the runtime may not be built yet.
 */
export function idempotencyModuleReachableFrom(host: NestModuleRef | null | undefined): NestModuleRef | undefined {
  if (!host) return undefined;
  if (host.providers.has(IDEMPOTENCY_RUNTIME)) return host;
  return lookupInImports(host, new Set(), false);
}

function lookupInImports(module: NestModuleRef, seen: Set<unknown>, traversing: boolean): NestModuleRef | undefined {
  for (const related of module.imports ?? []) {
    if (!related) continue;
    // Past the first level, only modules re-exported by the one we came through count.
    if (traversing && !module.exports.has(related.metatype)) continue;
    const id = related.id ?? related;
    if (seen.has(id)) continue;
    seen.add(id);
    if (related.exports.has(IDEMPOTENCY_RUNTIME) && related.providers.has(IDEMPOTENCY_RUNTIME)) return related;
    const found = lookupInImports(related, seen, true);
    if (found) return found;
  }
  return undefined;
}
