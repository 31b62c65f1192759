// Subpath `nestjs-idempotency/opentelemetry`: the only module that imports
// @opentelemetry/api, so applications that do not trace never load it.
import { SpanKind, SpanStatusCode, context, metrics, trace, type Attributes, type Meter, type Tracer } from '@opentelemetry/api';
import type { IdempotencyEvent, IdempotencyEventListener, IdempotencyEventType } from '../core/events.js';

/** Attribute names, stable: dashboards and alerts may rely on them. */
export const IDEMPOTENCY_ATTRIBUTES = {
  /** The event type of the latest event (on the active span: the outcome so far). */
  outcome: 'idempotency.outcome',
  /** The event type, on store spans and span events. */
  event: 'idempotency.event',
  /** The scoped SHA-256 of the key (never the raw client key). */
  keyHash: 'idempotency.key_hash',
  handler: 'idempotency.handler',
  /** True on the active span when the response was replayed instead of executed. */
  replayed: 'idempotency.replayed',
  durationMs: 'idempotency.duration_ms',
  storeLatencyMs: 'idempotency.store_latency_ms',
  failOpen: 'idempotency.fail_open',
  reason: 'idempotency.reason',
  /** The step's name, on the span of each `step_completed` / `step_replayed` (docs/steps.md). */
  step: 'idempotency.step',
  /** The store whose outbox the backlog gauges measure (the `store` of `outbox_backlog` events). */
  store: 'idempotency.store',
} as const;

/** Metric names, stable: the outbox's gauges (docs/outbox.md), attribute `idempotency.store`. */
export const IDEMPOTENCY_METRICS = {
  /** Executions whose messages wait to be sent, unit `{execution}`, as the relay last read them. */
  outboxBacklog: 'idempotency.outbox.backlog',
  /** Age of the oldest waiting execution, unit `s`; 0 when none waits. */
  outboxOldestAge: 'idempotency.outbox.oldest_age',
} as const;

/** Events that mean the store call failed, or the protection was lost. */
const ERROR_EVENTS: ReadonlySet<IdempotencyEventType> = new Set<IdempotencyEventType>(['store_error', 'lease_lost']);

/** Options of `createOpenTelemetryListener`. */
export interface OpenTelemetryListenerOptions {
  /**
   * Tracer for the store spans.
   * @default trace.getTracer('nestjs-idempotency') from the global tracer provider
   */
  tracer?: Tracer;
  /**
   * Records one span per store call that led to an event (`idempotency claimed`,
   * `idempotency completed`, ...), timed from the event's `storeLatencyMs`, as a child
   * of the active span.
   * @default true
   */
  storeSpans?: boolean;
  /**
   * Annotates the active span (your HTTP or message span) with the outcome attributes
   * and one span event per idempotency event.
   * @default true
   */
  annotateActiveSpan?: boolean;
  /**
   * Meter of the outbox's observable gauges (`IDEMPOTENCY_METRICS`), created at the first
   * `outbox_backlog` event: an application without the outbox gets none.
   * @default metrics.getMeter('nestjs-idempotency') from the global meter provider, looked up then
   */
  meter?: Meter;
}

/**
 * An `onEvent` listener that reports idempotency to OpenTelemetry: the active span
 * gets `idempotency.outcome`, `idempotency.key_hash`, `idempotency.handler`,
 * `idempotency.replayed` and a span event per idempotency event, and each store call
 * gets its own span. Needs a context manager (the Node SDK registers one) for the
 * active span to be the request's span. The outbox's backlog (`outbox_backlog` events) is
 * reported as the observable gauges `idempotency.outbox.backlog` and
 * `idempotency.outbox.oldest_age`, with the attribute `idempotency.store`.
 */
export function createOpenTelemetryListener(options: OpenTelemetryListenerOptions = {}): IdempotencyEventListener {
  const storeSpans = options.storeSpans ?? true;
  const annotate = options.annotateActiveSpan ?? true;
  // Resolved lazily so a tracer provider registered after the module is configured still counts.
  let tracer = options.tracer;
  const observeBacklog = outboxGauges(options);
  return (event) => {
    // A sample of the store read by the relay's timer: no request's span is concerned.
    if (event.type === 'outbox_backlog') return observeBacklog(event);
    const attributes = attributesOf(event);
    if (annotate) {
      const active = trace.getActiveSpan();
      if (active?.isRecording()) {
        active.setAttribute(IDEMPOTENCY_ATTRIBUTES.outcome, event.type);
        active.setAttribute(IDEMPOTENCY_ATTRIBUTES.keyHash, event.key);
        if (event.handler) active.setAttribute(IDEMPOTENCY_ATTRIBUTES.handler, event.handler);
        if (event.type === 'replayed') active.setAttribute(IDEMPOTENCY_ATTRIBUTES.replayed, true);
        else if (event.type === 'claimed') active.setAttribute(IDEMPOTENCY_ATTRIBUTES.replayed, false);
        active.addEvent(`idempotency.${event.type}`, attributes, event.at);
      }
    }
    if (storeSpans && event.storeLatencyMs !== undefined) {
      tracer ??= trace.getTracer('nestjs-idempotency');
      const span = tracer.startSpan(
        `idempotency ${event.type}`,
        { kind: SpanKind.INTERNAL, startTime: event.at - event.storeLatencyMs, attributes },
        context.active(),
      );
      if (ERROR_EVENTS.has(event.type)) {
        if (event.error instanceof Error) span.recordException(event.error, event.at);
        span.setStatus({ code: SpanStatusCode.ERROR, message: event.error instanceof Error ? event.error.message : event.type });
      }
      span.end(event.at);
    }
  };
}

/** Keeps each store's last backlog and reports it on collection; the gauges are made at the first one. */
function outboxGauges(options: OpenTelemetryListenerOptions): (event: IdempotencyEvent) => void {
  const backlogs = new Map<string, { pending: number; oldestAgeSeconds: number }>();
  return (event) => {
    const first = backlogs.size === 0;
    backlogs.set(event.store ?? 'unknown', { pending: event.pending ?? 0, oldestAgeSeconds: (event.oldestAgeMs ?? 0) / 1000 });
    if (!first) return;
    const meter = options.meter ?? metrics.getMeter('nestjs-idempotency');
    meter
      .createObservableGauge(IDEMPOTENCY_METRICS.outboxBacklog, {
        description: 'Executions whose outbox messages wait to be sent, as the relay last read them.',
        unit: '{execution}',
      })
      .addCallback((result) => {
        for (const [store, { pending }] of backlogs) result.observe(pending, { [IDEMPOTENCY_ATTRIBUTES.store]: store });
      });
    meter
      .createObservableGauge(IDEMPOTENCY_METRICS.outboxOldestAge, {
        description: 'Age of the oldest outbox execution waiting to be sent (0 when none waits), as the relay last read it.',
        unit: 's',
      })
      .addCallback((result) => {
        for (const [store, { oldestAgeSeconds }] of backlogs) result.observe(oldestAgeSeconds, { [IDEMPOTENCY_ATTRIBUTES.store]: store });
      });
  };
}

function attributesOf(event: IdempotencyEvent): Attributes {
  const attributes: Attributes = {
    [IDEMPOTENCY_ATTRIBUTES.event]: event.type,
    [IDEMPOTENCY_ATTRIBUTES.keyHash]: event.key,
    [IDEMPOTENCY_ATTRIBUTES.durationMs]: event.durationMs,
  };
  if (event.handler) attributes[IDEMPOTENCY_ATTRIBUTES.handler] = event.handler;
  if (event.storeLatencyMs !== undefined) attributes[IDEMPOTENCY_ATTRIBUTES.storeLatencyMs] = event.storeLatencyMs;
  if (event.failOpen !== undefined) attributes[IDEMPOTENCY_ATTRIBUTES.failOpen] = event.failOpen;
  if (event.reason) attributes[IDEMPOTENCY_ATTRIBUTES.reason] = event.reason;
  if (event.step !== undefined) attributes[IDEMPOTENCY_ATTRIBUTES.step] = event.step;
  return attributes;
}
