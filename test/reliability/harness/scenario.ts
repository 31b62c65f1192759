/**
 * One harness run: application processes over one store, the load, fault helpers,
 * and the final settle-and-check. Used by the reliability specs and by `npm run soak`.
 */
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { AppProcess, startApps, stopApps, type AppEnv } from './app-processes.js';
import { HarnessClient, type Outcome } from './client.js';
import { checkInvariant, readEffects, type Effect, type InvariantReport } from './invariant.js';
import { LoadDriver, settleAll, type KeyPlan } from './load.js';

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export interface HarnessRunOptions {
  /** Application processes. @default 2 */
  readonly apps?: number;
  /** Extra environment of every process (store selection and its settings). */
  readonly env?: Omit<AppEnv, 'HARNESS_EFFECT_DIR'>;
  /** Lease of the handler, ms: how long a key stays blocked after its process crashed. @default 1500 */
  readonly leaseTtl?: number;
  /** @default random */
  readonly seed?: number;
  /** @default 8 */
  readonly concurrency?: number;
  /** Client timeout per request, ms. @default 5000 */
  readonly clientTimeoutMs?: number;
  /** Where effects come from, when not the processes' effect files (transactional effects in a database). */
  readonly readEffects?: () => Promise<Effect[]>;
}

export class HarnessRun {
  readonly runId = randomUUID().slice(0, 8);
  readonly seed: number;
  readonly effectDir: string;
  apps: AppProcess[] = [];
  client!: HarnessClient;
  driver!: LoadDriver;
  private loading: Promise<void> | undefined;
  /** Fault log: what was injected when (epoch ms). */
  readonly faults: { kind: string; at: number; detail?: string }[] = [];

  constructor(private readonly options: HarnessRunOptions = {}) {
    this.seed = options.seed ?? Math.floor(Math.random() * 2 ** 31);
    this.effectDir = mkdtempSync(join(tmpdir(), `idem-harness-${this.runId}-`));
  }

  async start(): Promise<void> {
    this.apps = await startApps(this.options.apps ?? 2, {
      ...this.options.env,
      HARNESS_EFFECT_DIR: this.effectDir,
      HARNESS_LEASE_TTL: String(this.options.leaseTtl ?? 1_500),
    });
    this.client = new HarnessClient(this.apps, this.options.clientTimeoutMs ?? 5_000);
    this.driver = new LoadDriver(this.client, { keyPrefix: `k${this.runId}`, seed: this.seed, concurrency: this.options.concurrency ?? 8 });
  }

  /** Starts the randomized load in the background. */
  startLoad(): void {
    this.loading = this.driver.run();
  }

  async stopLoad(): Promise<void> {
    this.driver.stop();
    await this.loading;
  }

  /**
   * Kills process `index` with SIGKILL while it is inside handlers: new requests stop
   * going to it, its other requests finish, then `hanging` requests that sleep in the
   * handler (before their effect) are sent to it and, once every one of them is
   * inside the handler, the process is killed. Then it is started again (new port).
   *
   * Draining first is deliberate: a request killed between its effect and the store
   * write is the one window a non-transactional store cannot close (see
   * docs/reliability.md); the transactional TypeORM mode closes it.
   */
  async killMidHandler(index: number, hanging = 3): Promise<{ hungKeys: string[] }> {
    const app = this.apps[index];
    this.driver.routable = this.driver.routable.filter((i) => i !== index);
    await waitFor(() => this.client.inFlight(index) === 0, 10_000, `${app.name} to drain`);
    const hungKeys = Array.from({ length: hanging }, (_, i) => `k${this.runId}-hang-${this.faults.length}-${i}`);
    const plans: KeyPlan[] = hungKeys.map((key) => ({ key, kind: 'single', payload: { hang: key } }));
    this.driver.plans.push(...plans);
    const pid = app.pid!;
    const requests = plans.map((plan) =>
      this.client.send({ key: plan.key, payload: plan.payload, appIndex: index, delayMs: 60_000, timeoutMs: 20_000 }),
    );
    await waitFor(() => hungKeys.every((key) => this.startedKeys(app.name, pid).has(key)), 10_000, `hanging requests to reach ${app.name}`);
    this.faults.push({ kind: 'app-sigkill', at: Date.now(), detail: `${app.name} pid ${pid} with ${hanging} requests mid-handler` });
    await app.kill('SIGKILL');
    await Promise.all(requests);
    await app.start();
    this.driver.routable = [...this.driver.routable, index].sort();
    return { hungKeys };
  }

  /**
   * SIGKILLs process `index` at whatever point its requests are (no draining), then
   * starts it again. Only a store whose record commits with the effect (the
   * transactional TypeORM mode) keeps the invariant under this fault.
   */
  async crash(index: number): Promise<void> {
    const app = this.apps[index];
    // Kill it while it has requests to cut short (a kill between requests proves little).
    await waitFor(() => this.client.inFlight(index) > 0, 10_000, `a request in flight to ${app.name}`);
    this.faults.push({
      kind: 'app-sigkill-undrained',
      at: Date.now(),
      detail: `${app.name} pid ${app.pid} with ${this.client.inFlight(index)} requests in flight`,
    });
    this.driver.routable = this.driver.routable.filter((i) => i !== index);
    await app.kill('SIGKILL');
    await app.start();
    this.driver.routable = [...this.driver.routable, index].sort();
  }

  /** Settles every key (see `settleAll`) and checks the invariant. */
  async finish(settleDeadlineMs = 20_000): Promise<InvariantReport & { unsettled: string[] }> {
    await this.stopLoad();
    const unsettled = await settleAll(this.client, this.driver.plans, { deadlineMs: settleDeadlineMs });
    const effects = this.options.readEffects ? await this.options.readEffects() : readEffects(this.effectDir);
    const report = checkInvariant(effects, this.client.outcomes);
    // An application process that died by itself is a failure even if the others covered for it.
    const crashes = this.apps.flatMap((app) => app.crashes.map((crash) => `crash: ${crash}`));
    return { ...report, violations: [...crashes, ...report.violations], unsettled };
  }

  outcomesIn(phase: string): Outcome[] {
    return this.client.outcomes.filter((o) => o.phase === phase);
  }

  async stop(): Promise<void> {
    this.driver?.stop();
    await this.loading?.catch(() => undefined);
    this.client?.close();
    await stopApps(this.apps);
    rmSync(this.effectDir, { recursive: true, force: true });
  }

  private startedKeys(appName: string, pid: number): Set<string> {
    const file = readdirSync(this.effectDir).find((f) => f === `started-${appName}-${pid}.log`);
    if (!file) return new Set();
    return new Set(
      readFileSync(join(this.effectDir, file), 'utf8')
        .split('\n')
        .filter(Boolean)
        .map((line) => (JSON.parse(line) as { key: string }).key),
    );
  }
}

export async function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(20);
  }
}
