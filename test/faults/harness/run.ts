/**
 * One fault run: application instances over one store behind fault proxies, the
 * reliability harness's load (new keys, sequential and concurrent duplicates, mismatches,
 * failing handlers, slow handlers hit by duplicates) and client, a fault, the heal, then
 * the harness's settle-and-check. What every fault test asserts is in `expectFaultRun`.
 */
import { randomUUID } from 'node:crypto';
import type { AppProcess } from '../../reliability/harness/app-processes.js';
import { HarnessClient, isSuccess, type Outcome } from '../../reliability/harness/client.js';
import { checkInvariant, formatStats, type Effect, type InvariantReport } from '../../reliability/harness/invariant.js';
import { LoadDriver, settleAll } from '../../reliability/harness/load.js';
import { startFaultApp, type FaultApp } from './app.js';
import type { FaultBackendOptions, FaultStore } from './stores.js';

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface FaultRunOptions {
  /** Application instances over the store. @default 2 */
  readonly apps?: number;
  /**
   * Lease of the handler, ms. Longer than the settle deadline on purpose: a key still
   * locked after the heal must show up as unsettled, not be freed by its lease running out.
   * @default 30_000
   */
  readonly leaseTtl?: number;
  readonly transactional?: boolean;
  /** Parallel clients of the load. @default 6 */
  readonly concurrency?: number;
  /** Longest wait for any answer, ms: a request that outlives it is a `timeout` (a hang). */
  readonly answerBoundMs: number;
  /** @default random */
  readonly seed?: number;
  /** Client settings of every instance's store. @default {} (the documented ones) */
  readonly backend?: FaultBackendOptions;
}

export interface FaultReport extends InvariantReport {
  readonly unsettled: string[];
  /** Longest answer of the whole run, ms. */
  readonly slowestMs: number;
}

export class FaultRun {
  readonly seed: number;
  readonly effects: Effect[] = [];
  readonly storeErrors: string[] = [];
  /** `lease_lost` events (app: store key): a lease ran out before its result was written. */
  readonly leaseLost: string[] = [];
  /** Longest fault so far (apply to heal), ms. */
  longestFaultMs = 0;
  /** Longest `stalled` fault so far, ms (nothing moves: no lease can be renewed meanwhile). */
  longestStallMs = 0;
  readonly faults: { kind: string; at: number; detail?: string }[] = [];
  apps: FaultApp[] = [];
  client!: HarnessClient;
  driver!: LoadDriver;
  private loading: Promise<void> | undefined;
  private readonly runId = randomUUID().slice(0, 8);

  constructor(
    readonly store: FaultStore,
    private readonly options: FaultRunOptions,
  ) {
    this.seed = options.seed ?? Math.floor(Math.random() * 2 ** 31);
  }

  async start(): Promise<void> {
    const count = this.options.apps ?? 2;
    for (let i = 0; i < count; i++) {
      const backend = await this.store.openBackend(this.options.backend);
      this.apps.push(
        await startFaultApp(`app${i}`, backend, {
          leaseTtl: this.options.leaseTtl ?? 30_000,
          transactional: this.options.transactional,
          effects: this.effects,
          storeErrors: this.storeErrors,
          leaseLost: this.leaseLost,
        }),
      );
    }
    // The harness client only reads `name` and `port` of an application.
    this.client = new HarnessClient(this.apps as unknown as AppProcess[], this.options.answerBoundMs);
    this.driver = new LoadDriver(this.client, { keyPrefix: `f${this.runId}`, seed: this.seed, concurrency: this.options.concurrency ?? 6 });
  }

  startLoad(): void {
    this.loading = this.driver.run();
  }

  /** Applies `fault` to every path of the store, under a phase label of its own. */
  async fault(kind: string, apply: () => void | Promise<void>): Promise<void> {
    this.client.phase = kind;
    this.faults.push({ kind, at: Date.now() });
    await apply();
  }

  /** Lease of the handlers, ms. */
  get leaseTtl(): number {
    return this.options.leaseTtl ?? 30_000;
  }

  /**
   * Longest stall the run can judge, ms: two thirds of the lease, the least a lease renewed
   * every third of it has left when the stall starts. A longer stall may let the lease of a
   * handler it catches (unable to renew or complete) run out, and a retry then runs that
   * handler again: the lease protocol's documented behaviour (docs/reliability.md, "A lease
   * longer than the outages you want to absorb"), not a violation of the fault's.
   */
  get longestJudgeableFaultMs(): number {
    return Math.floor((this.leaseTtl * 2) / 3);
  }

  get faultOutlastedLease(): boolean {
    // Only a stall stops the renewals: a slow or flaky path lets them through.
    return this.longestStallMs > this.longestJudgeableFaultMs;
  }

  /** Heals every path; later outcomes are labelled `healed`. */
  async heal(): Promise<void> {
    await Promise.all(this.store.proxies.map((proxy) => proxy.heal()));
    const now = Date.now();
    const applied = this.faults.at(-1);
    if (applied && applied.kind !== 'heal') {
      this.longestFaultMs = Math.max(this.longestFaultMs, now - applied.at);
      if (applied.kind === 'stalled') this.longestStallMs = Math.max(this.longestStallMs, now - applied.at);
    }
    this.faults.push({ kind: 'heal', at: now });
    this.client.phase = 'healed';
  }

  /** One request with a key never seen, to the given instance: is the store path usable at once? */
  probe(appIndex = 0): Promise<Outcome> {
    return this.client.send({ key: `f${this.runId}-probe-${randomUUID()}`, payload: { probe: true }, appIndex });
  }

  /**
   * A key never seen, sent to the given instance again (the same key, as a client would)
   * until a success or `withinMs` after the first send: how soon is the path usable? A
   * fault that dropped connections (resets) leaves each client reconnecting with its
   * retryStrategy's backoff, during which the store refuses at once (503; no offline
   * queue); the probe's key must end with its one effect either way, or the run's
   * effects = keys check would count it. Resolves with the last answer, every attempt's
   * count and the time from the first send to that answer.
   */
  async probeUntilSuccess(withinMs: number, appIndex = 0): Promise<{ outcome: Outcome; attempts: number; durationMs: number }> {
    const key = `f${this.runId}-probe-${randomUUID()}`;
    const startedAt = Date.now();
    for (let attempts = 1; ; attempts++) {
      const outcome = await this.client.send({ key, payload: { probe: true }, appIndex });
      const durationMs = Date.now() - startedAt;
      if (isSuccess(outcome.status) || durationMs >= withinMs) return { outcome, attempts, durationMs };
      await sleep(Math.min(50, withinMs - durationMs));
    }
  }

  outcomesIn(phase: string): Outcome[] {
    return this.client.outcomes.filter((o) => o.phase === phase);
  }

  /** Stops the load, retries every key until it settles (or `settleDeadlineMs`), checks the invariant. */
  async finish(settleDeadlineMs = 8_000): Promise<FaultReport> {
    this.driver.stop();
    await this.loading;
    const unsettled = await settleAll(this.client, this.driver.plans, { deadlineMs: settleDeadlineMs, concurrency: 8, retryDelayMs: 100 });
    // A store's table outlives a run (one per suite): only this run's keys count.
    const effects = (this.store.readEffects ? await this.store.readEffects() : this.effects).filter((e) =>
      e.key.startsWith(`f${this.runId}-`),
    );
    const report = checkInvariant(effects, this.client.outcomes);
    const slowestMs = Math.max(0, ...this.client.outcomes.map((o) => o.durationMs));
    return { ...report, unsettled, slowestMs };
  }

  describe(report: FaultReport): string {
    const errors = [...new Set(this.storeErrors.map((e) => e.replace(/\d+/g, 'N')))].slice(0, 8);
    return `${this.store.name} seed=${this.seed} slowest=${report.slowestMs}ms ${formatStats(report.stats)} faults=${JSON.stringify(this.faults)} storeErrors=${JSON.stringify(errors)} leaseLost=${this.leaseLost.length} longestFault=${this.longestFaultMs}ms/lease ${this.leaseTtl}ms paths=${JSON.stringify(this.store.proxies.map((p) => ({ accepted: p.stats.accepted, open: p.stats.open, reset: p.stats.reset })))}`;
  }

  async stop(): Promise<void> {
    this.driver?.stop();
    await this.loading?.catch(() => undefined);
    this.client?.close();
    await Promise.all(this.apps.map((app) => app.close()));
  }
}

/**
 * What every fault run must show: the invariant (no handler ran twice for a key, every
 * success is the one effect's), every key settled within the settle deadline (so well
 * inside the lease: a claim left by the fault did not lock its key for a lease), no
 * request unanswered within the bound, and effects = keys.
 */
export function expectFaultRun(run: FaultRun, report: FaultReport): void {
  const context = run.describe(report);
  // Such a run measures nothing about the fault: its double runs are lease expiries.
  if (run.faultOutlastedLease) {
    throw new Error(
      `the stall lasted ${run.longestStallMs} ms, more than two thirds of the lease (${run.leaseTtl} ms): leases may have run out, and a handler run again after that is the documented consequence, not the fault's; keep stalls under ${run.longestJudgeableFaultMs} ms. ${context}`,
    );
  }
  const hangs = run.client.outcomes.filter((o) => o.status === 'timeout').map((o) => `${o.key} (${o.phase})`);
  expect({ context, violations: report.violations, unsettled: report.unsettled, hangs }).toEqual({
    context,
    violations: [],
    unsettled: [],
    hangs: [],
  });
  expect({ effects: report.stats.effects, context }).toEqual({ effects: report.stats.keys, context });
}

/** Waits until the run has seen `count` answers matching `test` (or fails after `timeoutMs`). */
export async function untilOutcomes(run: FaultRun, test: (o: Outcome) => boolean, count: number, timeoutMs: number, what: string) {
  const deadline = Date.now() + timeoutMs;
  while (run.client.outcomes.filter(test).length < count) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(20);
  }
}

export { isSuccess };
