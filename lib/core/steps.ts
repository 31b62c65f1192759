import { IdempotencyConfigurationError, IdempotencyStoreUnavailableError, isIdempotencyError } from './errors.js';
import type { IdempotencyEventType } from './events.js';
import { sha256 } from './hash.js';
import { listenedTypesOf } from './listened-types.js';
import { decodeValue, deserializeOutcome, serializeOutcome, valueOutcome } from './outcome.js';
import { currentSlot, type StepHost, type StepLedger } from './step-context.js';
import { runInStep } from './step-call.js';
import { IdempotencyLeaseLostError } from './step-errors.js';
import { supportsSteps, type IdempotencyStepStore } from './store.js';

/**
 * Runs `run` once per execution: inside an idempotent execution (an `@Idempotent()`
 * handler of any transport, `makeIdempotent`, `IdempotencyService.run`), unless an
 * earlier attempt of the same execution (same storage key, same fingerprint) already
 * finished the step named `name`, in which case the recorded result is returned and
 * `run` is not called. A step that throws records nothing and rethrows (the name may be
 * tried again in the same attempt).
 *
 * `run` receives the step's key (`stepKey(name)`): pass it downstream as the idempotency
 * key of the external call, so that a step cut off mid-call is de-duplicated there too.
 *
 * The result is stored like a response (`'faithful'` encoding: `Date`, `Map`, `Set`,
 * `bigint`, `Buffer` come back as themselves; at most `maxResponseBytes`), and what `step`
 * resolves with is that stored copy, on the first attempt as on a retry. A result that
 * cannot be stored fails the step before the next one runs.
 *
 * Throws `IdempotencyConfigurationError` outside an idempotent execution, for a name
 * used twice in one execution, for a result that cannot be stored and on a store without
 * step records; `IdempotencyLeaseLostError` once another worker took the key over;
 * `IdempotencyStoreUnavailableError` when the store fails (or the execution runs
 * unprotected through an outage under `onStoreError: 'fail-open'`). See docs/steps.md.
 */
export async function step<T>(name: string, run: (stepKey: string) => T | Promise<T>): Promise<T> {
  const host = hostFor('step', name);
  if (typeof run !== 'function') {
    throw new IdempotencyConfigurationError(
      `step('${name}', run) was given no function to run.`,
      'Pass the work as a function: step(name, (key) => ...).',
    );
  }
  const store = host.policy.store;
  if (!supportsSteps(store)) {
    throw new IdempotencyConfigurationError(
      `step('${name}') runs on a store that cannot record steps (${store.constructor?.name ?? 'custom store'} has no loadSteps/saveStep).`,
      'Use a built-in store (memory, Redis, TypeORM), or implement loadSteps and saveStep and run describeStoreContract against it.',
    );
  }
  const ledger = (host.stepLedger ??= { names: new Set<string>() });
  if (ledger.names.has(name)) {
    throw new IdempotencyConfigurationError(
      `step('${name}') was called twice in one execution.`,
      'Give every step of a handler its own name (in a loop, put the index in it: step(`email-${i}`, ...)).',
    );
  }
  ledger.names.add(name);
  try {
    return await runStep(host, store, ledger, name, run);
  } catch (error) {
    // A failed step recorded nothing: the handler may try the same name again.
    ledger.names.delete(name);
    throw error;
  }
}

/**
 * The key of the step named `name` of the current execution, without running anything:
 * the same on every attempt and in every process, different for another client key,
 * principal, operation, request or step name. Printable ASCII (`step_` and 43 base64url
 * characters), never containing the client's key. Throws `IdempotencyConfigurationError`
 * outside an idempotent execution.
 */
export function stepKey(name: string): string {
  return stepKeyOf(hostFor('stepKey', name), name);
}

async function runStep<T>(
  host: StepHost,
  store: IdempotencyStepStore,
  ledger: StepLedger,
  name: string,
  run: (stepKey: string) => T | Promise<T>,
): Promise<T> {
  if (leaseGone(host)) throw new IdempotencyLeaseLostError(name);
  const id = stepIdOf(host.fingerprint, name);
  const loadStartedAt = Date.now();
  const finished = await finishedSteps(host, store, ledger);
  const recorded = finished[id];
  if (recorded !== undefined) {
    emitStep(host, 'step_replayed', name, Date.now() - loadStartedAt);
    return decodeStep(recorded) as T;
  }
  // Checked after the read, right before the work: a worker that was paused past its lease
  // (no renewal ran, so it has heard of no takeover) must not start the step's effect.
  if (leaseGone(host)) throw new IdempotencyLeaseLostError(name);
  const key = stepKeyOf(host, name);
  // The outgoing client reads the step it runs in (its first call sends the step's key).
  const value = await runInStep(host, name, key, () => run(key));
  const result = encodeStep(name, value, host.policy.maxResponseBytes);
  // A zombie stops here: its lease was taken over while the step ran.
  if (host.isLost || host.isSettled) throw new IdempotencyLeaseLostError(name);
  const saveStartedAt = Date.now();
  let saved: boolean;
  try {
    saved = await store.saveStep(host.key, host.token, { step: id, result, ttl: host.policy.ttl });
  } catch (error) {
    throw isIdempotencyError(error) ? error : new IdempotencyStoreUnavailableError(error);
  }
  if (!saved) throw new IdempotencyLeaseLostError(name);
  emitStep(host, 'step_completed', name, Date.now() - saveStartedAt);
  return decodeStep(result) as T;
}

/** Another worker took the key over, or may have: the lease ran out as this process last knew it. */
function leaseGone(host: StepHost): boolean {
  return host.isLost || Date.now() >= host.ownedUntil;
}

/** Every finished step of the key, read once per execution (a failed read is tried again by the next step). */
function finishedSteps(host: StepHost, store: IdempotencyStepStore, ledger: StepLedger): Promise<Readonly<Record<string, string>>> {
  if (!ledger.finished) {
    ledger.finished = store.loadSteps(host.key).catch((error: unknown) => {
      ledger.finished = undefined;
      throw isIdempotencyError(error) ? error : new IdempotencyStoreUnavailableError(error);
    });
  }
  return ledger.finished;
}

/** The execution the caller runs in, or the configuration error (with its fix) for a call outside one. */
function hostFor(fn: 'step' | 'stepKey', name: string): StepHost {
  if (typeof name !== 'string' || name.length === 0) {
    throw new IdempotencyConfigurationError(
      `${fn}() needs a step name, got ${typeof name === 'string' ? 'an empty string' : typeof name}.`,
      `Name each step: ${fn}('charge'${fn === 'step' ? ', (key) => ...' : ''}).`,
    );
  }
  const slot = currentSlot();
  if (!slot) {
    throw new IdempotencyConfigurationError(
      `${fn}('${name}') was called outside an idempotent execution, where nothing can record it.`,
      'Call it inside an @Idempotent() handler (with a key), a makeIdempotent function or IdempotencyService.run, and await it there.',
    );
  }
  if (!slot.host) {
    throw new IdempotencyStoreUnavailableError(
      new Error(
        `${fn}('${name}') cannot be recorded: the execution runs without protection through a store outage (onStoreError: 'fail-open')`,
      ),
    );
  }
  return slot.host;
}

/** The id a step is recorded under: another fingerprint (another request under the same key) never finds it. */
function stepIdOf(fingerprint: string | undefined, name: string): string {
  return sha256((fingerprint ?? '') + '\u0000' + name);
}

function stepKeyOf(host: StepHost, name: string): string {
  return 'step_' + sha256('nestjs-idempotency:step\u0000' + host.key + '\u0000' + (host.fingerprint ?? '') + '\u0000' + name);
}

/** The stored form of a step's result, or the configuration error that fails the step. */
function encodeStep(name: string, value: unknown, maxBytes: number): string {
  const outcome = valueOutcome(value, 'faithful');
  let reason = outcome.kind === 'unstorable' ? outcome.reason.replace('the response', 'the result') : undefined;
  let result = '';
  if (!reason) {
    try {
      result = serializeOutcome(outcome);
      const bytes = result.length * 3 <= maxBytes ? 0 : Buffer.byteLength(result);
      if (bytes > maxBytes) reason = `the result is ${bytes} bytes, over maxResponseBytes (${maxBytes})`;
    } catch (error) {
      reason = `the result is not serializable (${(error as Error).message})`;
    }
  }
  if (reason) {
    throw new IdempotencyConfigurationError(
      `step('${name}') ran, but its result cannot be recorded: ${reason}.`,
      'Return plain data from a step (what a retry needs: ids, amounts), or raise maxResponseBytes.',
    );
  }
  return result;
}

function decodeStep(result: string): unknown {
  const outcome = deserializeOutcome(result);
  return outcome.kind === 'value' ? decodeValue(outcome.value) : undefined;
}

/** Reports a step to the execution's listener (never throws), with the step's name. */
function emitStep(host: StepHost, type: IdempotencyEventType, name: string, storeLatencyMs: number): void {
  const listener = host.policy.onEvent;
  if (!listener) return;
  const types = listenedTypesOf(listener);
  if (types !== undefined && !types.has(type)) return;
  const at = Date.now();
  try {
    listener({ type, key: host.key, handler: host.policy.handler, at, durationMs: at - host.startedAt, storeLatencyMs, step: name });
  } catch {
    // A faulty listener must not change the outcome of the step.
  }
}
