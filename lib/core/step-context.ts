import { AsyncLocalStorage } from 'node:async_hooks';
import type { ExecutionPolicy } from './execution.js';

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
  readonly parent: StepSlot | undefined;

  constructor(parent: StepSlot | undefined, host?: StepHost) {
    this.parent = parent;
    this.host = host;
  }
}

/**
 * @internal Registered on a global symbol, so that the ESM and CommonJS copies of this
 * package (both may load in one process) see the same executions.
 */
export const stepContext: AsyncLocalStorage<StepSlot> = ((globalThis as Record<symbol, unknown>)[Symbol.for('nestjs-idempotency:steps')] ??=
  new AsyncLocalStorage<StepSlot>()) as AsyncLocalStorage<StepSlot>;

/** The nearest slot of the caller's context that has a running execution (or runs unprotected). */
export function currentSlot(): StepSlot | undefined {
  for (let slot = stepContext.getStore(); slot; slot = slot.parent) {
    if (slot.host ? !slot.host.isSettled : slot.unprotected) return slot;
  }
  return undefined;
}

/**
 * Runs `fn` with `host` as the execution `step()` records under; its parent is the nearest
 * live slot of the caller's context (settled ones are not kept alive).
 */
export function runWithSteps<T>(host: StepHost, fn: () => T): T {
  return stepContext.run(new StepSlot(currentSlot(), host), fn);
}

/** Runs `fn` through a store outage (fail-open): its step() calls are refused, never run unrecorded. */
export function runWithoutProtection<T>(fn: () => T): T {
  const slot = new StepSlot(undefined);
  slot.unprotected = true;
  return stepContext.run(slot, fn);
}
