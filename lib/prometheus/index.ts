// Subpath `nestjs-idempotency/prometheus`: the only module that imports prom-client,
// so applications that do not use it never load it.
import { Counter, Gauge, Histogram, register as defaultRegistry, type Registry } from 'prom-client';
import type { IdempotencyEventListener } from '../core/events.js';

/** Store-latency buckets, ms: from a local Redis round trip to a struggling database. */
export const DEFAULT_STORE_LATENCY_BUCKETS_MS: readonly number[] = [0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500];

/** Options of `createPrometheusListener`. */
export interface PrometheusListenerOptions {
  /**
   * Registry the metrics are registered in; scrape it with `registry.metrics()`.
   * @default prom-client's global `register`
   */
  registry?: Registry;
  /**
   * Prepended to every metric name.
   * @default 'idempotency_'
   */
  prefix?: string;
  /**
   * Upper bounds of the store-latency histogram buckets, in ms (exported in seconds,
   * the Prometheus base unit).
   * @default DEFAULT_STORE_LATENCY_BUCKETS_MS
   */
  storeLatencyBucketsMs?: readonly number[];
  /**
   * Adds a `handler` label (`Controller.method`) to the events counter. Handler names
   * are bounded by your code, so the cardinality is small; turn it off for very large apps.
   * @default true
   */
  handlerLabel?: boolean;
}

type EventLabels = 'event' | 'handler';

/**
 * An `onEvent` listener that counts outcomes and measures store latency with prom-client:
 *
 * - `idempotency_events_total{event, handler}`: one per event (`claimed`, `replayed`,
 *   `in_flight_conflict`, `fingerprint_mismatch`, `store_error`, ...);
 * - `idempotency_steps_total{outcome, handler}`: durable steps (docs/steps.md) by outcome,
 *   `completed` (ran and recorded) or `replayed` (an earlier attempt's result returned);
 * - `idempotency_store_latency_seconds{event}`: duration of the store call that led to
 *   the event (`claimed` and `replayed` measure the claim, `completed` the write of
 *   the result, and so on);
 * - `idempotency_outbox_backlog{store}` and `idempotency_outbox_oldest_age_seconds{store}`:
 *   gauges of the outbox (docs/outbox.md), executions with messages waiting and the age of
 *   the oldest, as the relay last read them (`outbox_backlog` events, which being samples
 *   are not counted in `events_total`).
 *
 * Calling it twice with the same registry and prefix reuses the registered metrics,
 * so several modules (or a hot reload) do not clash.
 */
export function createPrometheusListener(options: PrometheusListenerOptions = {}): IdempotencyEventListener {
  const registry = options.registry ?? defaultRegistry;
  const prefix = options.prefix ?? 'idempotency_';
  const handlerLabel = options.handlerLabel ?? true;
  const eventsName = `${prefix}events_total`;
  const latencyName = `${prefix}store_latency_seconds`;

  const events =
    (registry.getSingleMetric(eventsName) as Counter<EventLabels> | undefined) ??
    new Counter<EventLabels>({
      name: eventsName,
      help: 'Idempotent executions by outcome event (claimed, completed, replayed, in_flight_conflict, fingerprint_mismatch, store_error, ...).',
      labelNames: handlerLabel ? ['event', 'handler'] : ['event'],
      registers: [registry],
    });
  const storeLatency =
    (registry.getSingleMetric(latencyName) as Histogram<'event'> | undefined) ??
    new Histogram<'event'>({
      name: latencyName,
      help: 'Latency of the idempotency store call that led to each event, in seconds.',
      labelNames: ['event'],
      buckets: (options.storeLatencyBucketsMs ?? DEFAULT_STORE_LATENCY_BUCKETS_MS).map((ms) => ms / 1000),
      registers: [registry],
    });

  const stepsName = `${prefix}steps_total`;
  const steps =
    (registry.getSingleMetric(stepsName) as Counter<'outcome' | 'handler'> | undefined) ??
    new Counter<'outcome' | 'handler'>({
      name: stepsName,
      help: 'Durable steps by outcome: completed (ran and recorded) or replayed (an earlier attempt recorded it).',
      labelNames: handlerLabel ? ['outcome', 'handler'] : ['outcome'],
      registers: [registry],
    });

  const backlogName = `${prefix}outbox_backlog`;
  const backlog =
    (registry.getSingleMetric(backlogName) as Gauge<'store'> | undefined) ??
    new Gauge<'store'>({
      name: backlogName,
      help: 'Executions whose outbox messages wait to be sent, as the relay last read them (every outbox.backlogInterval).',
      labelNames: ['store'],
      registers: [registry],
    });
  const oldestAgeName = `${prefix}outbox_oldest_age_seconds`;
  const oldestAge =
    (registry.getSingleMetric(oldestAgeName) as Gauge<'store'> | undefined) ??
    new Gauge<'store'>({
      name: oldestAgeName,
      help: 'Age of the oldest outbox execution waiting to be sent, in seconds (0 when none waits), as the relay last read it.',
      labelNames: ['store'],
      registers: [registry],
    });

  return (event) => {
    if (event.type === 'outbox_backlog') {
      const labels = { store: event.store ?? 'unknown' };
      backlog.set(labels, event.pending ?? 0);
      oldestAge.set(labels, (event.oldestAgeMs ?? 0) / 1000);
      if (event.storeLatencyMs !== undefined) storeLatency.observe({ event: event.type }, event.storeLatencyMs / 1000);
      return;
    }
    if (event.type === 'step_completed' || event.type === 'step_replayed') {
      const outcome = event.type === 'step_completed' ? 'completed' : 'replayed';
      steps.inc(handlerLabel ? { outcome, handler: event.handler ?? 'unknown' } : { outcome });
    }
    events.inc(handlerLabel ? { event: event.type, handler: event.handler ?? 'unknown' } : { event: event.type });
    if (event.storeLatencyMs !== undefined) storeLatency.observe({ event: event.type }, event.storeLatencyMs / 1000);
  };
}
