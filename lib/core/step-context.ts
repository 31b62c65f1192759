import { AsyncLocalStorage } from 'node:async_hooks';
import type { ExecutionPolicy } from './execution.js';
import type { IdempotencyStore } from './store.js';
import { isThenable } from './thenable.js';

/**
 * What `step()` needs of the execution it runs in: the lease that owns the key (its
 * token fences every step write), the request's fingerprint, the policy's store and
 * limits. The `Lease` is one; nothing else is allocated for a handler that never calls
 * `step()` (the ledger is created by the first call).
 */
export interface StepHost {
  readonly key: string;
  readonly token: string;
  readonly fingerprint?: string;
  readonly policy: ExecutionPolicy;
  readonly startedAt: number;
  /** Another worker took the key over. */
  readonly isLost: boolean;
  /**
   * Until when the lease is this execution's as far as this process knows (the claim or
   * the last successful renewal, plus leaseTtl), epoch ms. Past it another worker may own
   * the key without this one having heard: a pause longer than the lease runs no renewal.
   */
  readonly ownedUntil: number;
  /** Completed, released or abandoned: its handler is over. */
  readonly isSettled: boolean;
  /** The steps of this execution so far, created by the first `step()` or `stepKey()`. */
  stepLedger?: StepLedger;
  /** The messages this execution staged in the outbox so far, created by the first `IdempotencyOutbox.emit()`. */
  outbox?: OutboxDraft;
}

/** The messages an execution staged (outbox.ts), sent only once its record completed. */
export interface OutboxDraft {
  /** The execution's outbox id (its key and lease token, hashed). */
  readonly id: string;
  /** Each an `OutboxMessage`, in the order they were staged. */
  readonly messages: Array<{ readonly id: string }>;
}

/**
 * An execution with no lease that still stages messages: an idempotent transaction (its
 * record and the staged messages are written in the transaction that runs the work). Its
 * slot serves `IdempotencyOutbox.emit()` only: `step()` skips it, as before.
 */
export interface OutboxHost {
  readonly key: string;
  /** Unique per attempt: the messages' ids derive from it. */
  readonly token: string;
  /** The store whose relay sends them, when the execution runs on one. */
  readonly store: IdempotencyStore | undefined;
  /** The work ended: nothing more is staged. */
  readonly isSettled: boolean;
  outbox?: OutboxDraft;
}

/** Per execution: the names used so far, and the finished steps read from the store (once). */
export interface StepLedger {
  readonly names: Set<string>;
  /** Every finished step of the key, by step id, read by the first `step()` (one round trip). */
  finished?: Promise<Readonly<Record<string, string>>>;
}

/**
 * One idempotent execution's place in the async context. `host` is set once the key is
 * claimed; a slot without a live host (not claimed yet, a replay, settled) is skipped
 * in favour of `parent`, the execution around it (a nested idempotent call).
 */
export class StepSlot {
  host: StepHost | undefined;
  /** The execution runs without protection (a store outage under `onStoreError: 'fail-open'`). */
  unprotected = false;
  /** A transaction's outbox (no lease): only `IdempotencyOutbox.emit()` reads it. */
  outboxHost: OutboxHost | undefined;
  readonly parent: StepSlot | undefined;

  constructor(parent: StepSlot | undefined, host?: StepHost) {
    this.parent = parent;
    this.host = host;
  }
}

/**
 * @internal The steps' storages (this file's execution slots and step-call.ts's step
 * bodies) and the number of scopes whose code may read them, on a global symbol so that
 * the ESM and CommonJS copies of this package (both may load in one process) see the same
 * executions and count them together. A symbol of its own, not the ones each storage once
 * had alone: a copy of an older version keeps its storages, never disabled by this one.
 */
interface StepStorages {
  readonly slots: AsyncLocalStorage<StepSlot>;
  readonly calls: AsyncLocalStorage<unknown>;
  /** Executions not settled yet and unprotected runs not ended: what may read the storages. */
  openScopes: number;
}

/** @internal */
export const stepStorages: StepStorages = ((globalThis as Record<symbol, unknown>)[Symbol.for('nestjs-idempotency:step-storages')] ??= {
  slots: new AsyncLocalStorage<StepSlot>(),
  calls: new AsyncLocalStorage<unknown>(),
  openScopes: 0,
} satisfies StepStorages) as StepStorages;

/**
 * Before Node 24, AsyncLocalStorage runs on async_hooks: once a storage is entered, a
 * promise hook stays on for the whole process and every promise of every route pays for
 * it (a million awaits 61-66 -> 139-149 ms on Node 20.20, 10-15 us per request of an
 * undecorated route: docs/performance.md, "What we learned"). Node 24's storages
 * (AsyncContextFrame) have no hook.
 * `_enable` is the hook-based class's own method: where it is missing, nothing is disabled.
 */
const storageRunsOnHooks = typeof (AsyncLocalStorage.prototype as { _enable?: unknown })._enable === 'function';

/**
 * A scope opens: an execution about to run (its lease calls `closeStepScope()` once, when
 * it settles) or an unprotected run. The storages stay on while any scope is open.
 */
export function openStepScope(): void {
  stepStorages.openScopes++;
}

/**
 * A scope closed. With none open, no code may read the storages any more (a settled
 * execution's slot is skipped anyway): they are disabled, so the process's promise hook
 * goes off unless another storage (nestjs-cls, OpenTelemetry...) holds it on, and the next
 * execution's `run()` turns them on again. So a process whose idempotent handlers are
 * idle no longer pays for them on its other routes.
 */
export function closeStepScope(): void {
  if (stepStorages.openScopes === 0 || --stepStorages.openScopes > 0 || !storageRunsOnHooks) return;
  stepStorages.slots.disable();
  stepStorages.calls.disable();
}

/** The nearest slot of the caller's context that has a running execution (or runs unprotected). */
export function currentSlot(): StepSlot | undefined {
  for (let slot = stepStorages.slots.getStore(); slot; slot = slot.parent) {
    if (slot.host ? !slot.host.isSettled : slot.unprotected) return slot;
  }
  return undefined;
}

/** The nearest slot of the caller's context that can stage outbox messages: a running execution, an open transaction, or an unprotected run. */
export function currentOutboxSlot(): StepSlot | undefined {
  for (let slot = stepStorages.slots.getStore(); slot; slot = slot.parent) {
    if (slot.outboxHost) {
      if (!slot.outboxHost.isSettled) return slot;
    } else if (slot.host ? !slot.host.isSettled : slot.unprotected) return slot;
  }
  return undefined;
}

/**
 * Runs `fn` (an idempotent transaction's work) with `host` as the execution
 * `IdempotencyOutbox.emit()` stages with. The caller settles `host` once `fn` ended.
 */
export async function runWithOutbox<T>(host: OutboxHost, fn: () => Promise<T>): Promise<T> {
  const slot = new StepSlot(currentSlot());
  slot.outboxHost = host;
  openStepScope();
  try {
    return await stepStorages.slots.run(slot, fn);
  } finally {
    closeStepScope();
  }
}

/**
 * Runs `fn` with `host` as the execution `step()` records under; its parent is the nearest
 * live slot of the caller's context (settled ones are not kept alive). The caller holds a
 * scope open (`openStepScope()`) until `host` settles.
 */
export function runWithSteps<T>(host: StepHost, fn: () => T): T {
  return stepStorages.slots.run(new StepSlot(currentSlot(), host), fn);
}

/**
 * Runs `fn` through a store outage (fail-open): its step() calls are refused, never run
 * unrecorded. The slot ends with `fn` (its promise, when it returns one): code it left
 * running finds no execution, as it would once the storages are off.
 */
export function runWithoutProtection<T>(fn: () => T): T {
  const slot = new StepSlot(undefined);
  slot.unprotected = true;
  openStepScope();
  const end = (): void => {
    if (!slot.unprotected) return;
    slot.unprotected = false;
    closeStepScope();
  };
  let result: T;
  try {
    result = stepStorages.slots.run(slot, fn);
  } catch (error) {
    end();
    throw error;
  }
  if (!isThenable(result)) {
    end();
    return result;
  }
  // One `then` on what `fn` returned: a lazy thenable (a query builder) runs on each call.
  const settled = Promise.resolve(result);
  settled.then(end, end);
  return settled as T;
}
