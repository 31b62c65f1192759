import type { AsyncLocalStorage } from 'node:async_hooks';
import { stepStorages, type StepHost } from './step-context.js';

/**
 * The step whose `run` the caller is inside, for code that derives keys of its own from
 * it (the outgoing client sends the step's key). Set by `step()` around `run` only, so a
 * handler's code outside its steps sees none.
 */
export interface StepCall {
  readonly host: StepHost;
  readonly name: string;
  /** `stepKey(name)`: what `run` received. */
  readonly key: string;
  /** Keys handed out inside this step so far (the outgoing client's calls). */
  calls: number;
}

// Shared with the execution slots: both are disabled together once no execution is open.
const stepCalls = stepStorages.calls as AsyncLocalStorage<StepCall>;

/** Runs `run` as the body of the step `name` of `host`. */
export function runInStep<T>(host: StepHost, name: string, key: string, run: () => T): T {
  // A settled host's step call is never read (currentStepCall), and entering the storage
  // would turn it on again with no execution open to turn it off (step-context.ts).
  if (host.isSettled) return run();
  return stepCalls.run({ host, name, key, calls: 0 }, run);
}

/** The step the caller runs in, when its execution is still running. */
export function currentStepCall(): StepCall | undefined {
  const call = stepCalls.getStore();
  return call && !call.host.isSettled ? call : undefined;
}
