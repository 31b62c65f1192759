import type { IdempotencyEventListener, IdempotencyEventType } from './events.js';

/**
 * Marks a listener that reads only some event types, so that the engine builds no
 * event object for the others. The module's default log reads three rare types; without
 * this mark every request would still allocate and time a `claimed`, a `completed` or a
 * `replayed` event that nobody reads. A listener without the mark receives every event.
 * Internal: a `Symbol.for()` key, as the ESM and CommonJS copies of the library can
 * meet in one process.
 */
const LISTENED_TYPES = Symbol.for('nestjs-idempotency:listenedEventTypes');

type MarkedListener = IdempotencyEventListener & { [LISTENED_TYPES]?: ReadonlySet<IdempotencyEventType> };

/** Marks `listener` as reading only `types`, and returns it. */
export function listeningTo(listener: IdempotencyEventListener, types: readonly IdempotencyEventType[]): IdempotencyEventListener {
  Object.defineProperty(listener, LISTENED_TYPES, { value: new Set(types) });
  return listener;
}

/** The types `listener` reads, or `undefined` for every type. */
export function listenedTypesOf(listener: IdempotencyEventListener): ReadonlySet<IdempotencyEventType> | undefined {
  return (listener as MarkedListener)[LISTENED_TYPES];
}
