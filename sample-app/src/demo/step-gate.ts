/**
 * The demo's kill point between two steps, honoured only with SAMPLE_APP_DEMO_HOOKS=1
 * (never in production): a refund sent with `X-Demo-Pause-After-Step: <step>` prints
 * the line below once that step is recorded, then holds the refund (its lease still
 * renewed, as a live process does) so that `npm run demo` can SIGKILL the process at
 * exactly that point instead of guessing a moment with a sleep.
 */
export const DEMO_GATE_LINE = 'demo-gate: paused after step';

/** How long a paused refund waits for the kill before it carries on (nobody killed it). */
const PAUSE_MS = 60_000;

export async function pauseAfterStep(stepName: string, reference: string): Promise<void> {
  console.log(`${DEMO_GATE_LINE} ${stepName} of refund ${reference} (pid ${process.pid})`);
  await new Promise((resolve) => setTimeout(resolve, PAUSE_MS).unref());
}
