import type { IdempotencyEvent, IdempotencyEventListener } from './events.js';

/**
 * The listeners of a store's own events (`IdempotencyStore.addEventListener`): what the
 * store does outside any request, such as a memory eviction, a failed background purge or
 * a near cache that lost its connection. One faulty listener never keeps the others, or
 * the store's own work, from going on.
 */
export class StoreEventListeners {
  private readonly listeners = new Set<IdempotencyEventListener>();

  /** How many listen: a store logs a failure itself only when nobody does. */
  get size(): number {
    return this.listeners.size;
  }

  /** Adds `listener`; returns the function that removes it. */
  add(listener: IdempotencyEventListener): () => void {
    this.listeners.add(listener);
    return () => void this.listeners.delete(listener);
  }

  emit(event: IdempotencyEvent): void {
    for (const listener of this.listeners) {
      try {
        listener(event);
      } catch {
        // A faulty listener must not stop the others, nor the store's work that reported it.
      }
    }
  }
}
