import { randomUUID } from 'node:crypto';
import { sha256 } from '../core/hash.js';
import { currentStepCall } from '../core/step-call.js';
import { currentSlot, type StepHost } from '../core/step-context.js';

/** Calls made by each running execution outside its steps, in order. */
const callsOutsideSteps = new WeakMap<StepHost, number>();

/**
 * The key of a new logical call, made once before its first attempt:
 * - inside a `step()`, the step's own key (`stepKey(name)`) for its first call, then that
 *   key and the call's place in the step, so a step run again after a crash sends the
 *   same keys downstream;
 * - elsewhere inside an idempotent execution, derived from the execution (its storage key
 *   and fingerprint) and the call's place among the calls made outside steps, so a
 *   handler run again sends the same keys as long as it makes its calls in the same order;
 * - outside any execution, a UUID v4.
 */
export function callKey(): string {
  const host = currentSlot()?.host;
  const inStep = currentStepCall();
  // Only a step of the innermost execution: a nested execution (a makeIdempotent function
  // called in an outer step) keys its calls itself, as it would anywhere else.
  if (inStep && inStep.host === host) {
    const order = ++inStep.calls;
    return order === 1 ? inStep.key : derived('step-call', inStep.key, order);
  }
  if (!host) return randomUUID();
  const order = (callsOutsideSteps.get(host) ?? 0) + 1;
  callsOutsideSteps.set(host, order);
  return derived('call', host.key + '\u0000' + (host.fingerprint ?? ''), order);
}

function derived(kind: string, base: string, order: number): string {
  return `${kind}_` + sha256(`nestjs-idempotency:${kind}\u0000${base}\u0000${order}`);
}
