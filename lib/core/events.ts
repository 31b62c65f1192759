/**
 * Every outcome of an idempotent execution is reported through `onEvent`. Keys appear
 * only as their scoped SHA-256 (`key`), never as the raw client value.
 */
export type IdempotencyEventType =
  /** This call owns the key and runs the handler. */
  | 'claimed'
  /** The handler finished and its result was stored. */
  | 'completed'
  /** A stored result (or cached error) was returned instead of running the handler. */
  | 'replayed'
  /** A duplicate arrived while the first was still running (rejected, or about to wait). */
  | 'in_flight_conflict'
  /** Same key, different request. */
  | 'fingerprint_mismatch'
  /** The handler threw; the key was released so the client may retry. */
  | 'released'
  /** The handler threw an error that `cacheErrors` selected; the error was stored. */
  | 'error_cached'
  /** The lease was taken over by another worker (this one was too slow or paused); its result is not stored. */
  | 'lease_lost'
  /** The caller went away before the handler finished; the key stays leased until it expires. */
  | 'abandoned'
  /** The result could not be stored (stream, too large); duplicates will get a not-replayable error. */
  | 'response_not_storable'
  /** The store failed. `failOpen` tells whether the handler then ran unprotected. */
  | 'store_error'
  /**
   * The memory store, full, dropped a completed result before its `ttl` ran out: a retry
   * with that key would run the handler again. Raise `maxEntries` or move to a shared store.
   */
  | 'evicted_before_expiry'
  /** A `step()` ran and its result was recorded (`step` names it). */
  | 'step_completed'
  /** A `step()` finished by an earlier attempt of the execution returned its recorded result without running (`step` names it). */
  | 'step_replayed'
  /**
   * The outbox relay sent a message and the broker confirmed it: `key` is the message id,
   * `handler` the client's name, `durationMs` the time since the message was staged.
   */
  | 'outbox_sent'
  /** The outbox relay could not send a message (`error`); it is tried again after a back-off (`reason`). */
  | 'outbox_send_failed'
  /**
   * The outbox relay read what waits in its store (`store`), at most every
   * `outbox.backlogInterval`: `pending` executions, the oldest staged `oldestAgeMs` ago. A
   * sample, not an occurrence: the metrics listeners keep it as gauges.
   */
  | 'outbox_backlog';

/** One outcome of an idempotent execution, as `onEvent` listeners receive it. */
export interface IdempotencyEvent {
  readonly type: IdempotencyEventType;
  /** Scoped SHA-256 of the client key (what the store sees). */
  readonly key: string;
  /** Handler name, e.g. `PaymentsController.refund`, or the wrapper's name. */
  readonly handler?: string;
  /** Epoch ms when the event happened. */
  readonly at: number;
  /** Ms since the idempotent call started. */
  readonly durationMs: number;
  /** Ms spent in the store call that led to this event, when there was one. */
  readonly storeLatencyMs?: number;
  readonly error?: unknown;
  /** For `store_error`: whether the handler ran without protection. */
  readonly failOpen?: boolean;
  /** For `response_not_storable`: why. */
  readonly reason?: string;
  /** For `step_completed` and `step_replayed`: the step's name. */
  readonly step?: string;
  /**
   * For `outbox_backlog`: the store read, by its class name (`TypeOrmIdempotencyStore`);
   * another store of the same class in the module gets `#2`, `#3`, ... in the order its relay started.
   */
  readonly store?: string;
  /** For `outbox_backlog`: executions with messages waiting to be sent. */
  readonly pending?: number;
  /** For `outbox_backlog`: ms since the oldest waiting execution was staged; 0 when none waits. */
  readonly oldestAgeMs?: number;
}

/** Receives every `IdempotencyEvent` (the module's `onEvent` option). */
export type IdempotencyEventListener = (event: IdempotencyEvent) => void;
