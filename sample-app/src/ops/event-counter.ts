import type { IdempotencyEvent, IdempotencyEventType } from '../../../lib/index.js';

/** Counts the library's events by type, for GET /stats (a real service would export them as metrics). */
export class EventCounter {
  private readonly counts = new Map<IdempotencyEventType, number>();

  readonly listener = (event: IdempotencyEvent): void => {
    this.counts.set(event.type, (this.counts.get(event.type) ?? 0) + 1);
  };

  snapshot(): Partial<Record<IdempotencyEventType, number>> {
    return Object.fromEntries(this.counts);
  }
}
