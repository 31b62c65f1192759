import type { IdempotencyEvent, IdempotencyEventListener } from '../core/events.js';
import { listenedTypesOf, listeningTo } from '../core/listened-types.js';

/**
 * One listener that feeds several: pass the result as `onEvent`, e.g. a logger, a
 * Prometheus listener and an OpenTelemetry listener together. `undefined` entries are
 * skipped so optional listeners can be written inline. Each listener is isolated: one
 * that throws does not stop the others (nor, as with any listener, the request).
 */
export function combineListeners(
  ...listeners: ReadonlyArray<IdempotencyEventListener | undefined | null | false>
): IdempotencyEventListener {
  const active = listeners.filter((listener): listener is IdempotencyEventListener => typeof listener === 'function');
  if (active.length === 1) return active[0];
  const combined = (event: IdempotencyEvent) => {
    for (const listener of active) {
      try {
        listener(event);
      } catch {
        // Observability must never change an outcome: a faulty listener is skipped.
      }
    }
  };
  // Only when every listener reads some types only does the combination skip the others.
  const typeSets = active.map(listenedTypesOf);
  if (typeSets.every((types) => types !== undefined)) {
    return listeningTo(combined, [...new Set(typeSets.flatMap((types) => [...types!]))]);
  }
  return combined;
}
