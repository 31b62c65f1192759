/**
 * A bounded, randomized (seeded, so a failure can be replayed) mix of requests spread
 * over the application processes: new keys, sequential and concurrent duplicates,
 * mismatches (same key, another body), failing handlers followed by a retry, and slow
 * handlers hit by concurrent duplicates.
 */
import type { HarnessClient } from './client.js';

/** mulberry32: small, fast, seedable. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export type PlanKind = 'single' | 'duplicates' | 'concurrent' | 'mismatch' | 'fail-then-retry' | 'slow-concurrent';

const PLAN_KINDS: readonly PlanKind[] = ['single', 'duplicates', 'concurrent', 'mismatch', 'fail-then-retry', 'slow-concurrent'];

export interface KeyPlan {
  readonly key: string;
  readonly kind: PlanKind;
  /** The body the key was first sent with; the settle pass retries with it. */
  readonly payload: unknown;
  /**
   * The other body a `mismatch` plan sends with the same key. When it won the key (the plan's
   * body gets 422), the settle pass retries with it: a 422 says only that another body holds
   * the key, and that body's claim may have failed for its caller and still need a retry.
   */
  readonly otherPayload?: unknown;
}

export interface LoadOptions {
  /** Prefix of every key of this run (keeps runs and scenarios apart). */
  readonly keyPrefix: string;
  readonly seed: number;
  /** Parallel plan runners. @default 8 */
  readonly concurrency?: number;
  /** Stop starting plans after this many keys. @default unbounded (use `stop()`) */
  readonly maxKeys?: number;
  /** Longest slow-handler delay, ms. @default 300 */
  readonly maxDelayMs?: number;
}

/**
 * Runs plans until `stop()` (or `maxKeys`), sending each request to one of the
 * currently routable processes.
 */
export class LoadDriver {
  readonly plans: KeyPlan[] = [];
  /** Indexes of the processes new requests may go to (a process being drained or restarted is left out). */
  routable: number[];
  private stopped = false;
  private counter = 0;
  private readonly random: () => number;

  constructor(
    private readonly client: HarnessClient,
    private readonly options: LoadOptions,
  ) {
    this.random = seededRandom(options.seed);
    this.routable = client.apps.map((_, i) => i);
  }

  stop(): void {
    this.stopped = true;
  }

  /** Resolves when every runner has finished its current plan after `stop()`. */
  async run(): Promise<void> {
    this.stopped = false;
    const runners = Array.from({ length: this.options.concurrency ?? 8 }, () => this.runner());
    await Promise.all(runners);
  }

  private async runner(): Promise<void> {
    while (!this.stopped && (this.options.maxKeys === undefined || this.counter < this.options.maxKeys)) {
      const plan = this.nextPlan();
      await this.runPlan(plan);
    }
  }

  private nextPlan(): KeyPlan {
    const n = this.counter++;
    const kind = PLAN_KINDS[Math.floor(this.random() * PLAN_KINDS.length)];
    const key = `${this.options.keyPrefix}-${n}`;
    const payload = { n, amount: Math.floor(this.random() * 10_000) };
    const plan: KeyPlan = kind === 'mismatch' ? { key, kind, payload, otherPayload: { other: true, key } } : { key, kind, payload };
    this.plans.push(plan);
    return plan;
  }

  private pickApp(): number {
    const choices = this.routable.length > 0 ? this.routable : this.client.apps.map((_, i) => i);
    return choices[Math.floor(this.random() * choices.length)];
  }

  private delay(): number {
    return 50 + Math.floor(this.random() * ((this.options.maxDelayMs ?? 300) - 50));
  }

  private async runPlan(plan: KeyPlan): Promise<void> {
    const send = (extra: { payload?: unknown; fail?: boolean; delayMs?: number } = {}) =>
      this.client.send({
        key: plan.key,
        payload: extra.payload ?? plan.payload,
        appIndex: this.pickApp(),
        fail: extra.fail,
        delayMs: extra.delayMs,
      });
    switch (plan.kind) {
      case 'single':
        await send();
        return;
      case 'duplicates': {
        const count = 2 + Math.floor(this.random() * 3);
        for (let i = 0; i < count; i++) await send();
        return;
      }
      case 'concurrent': {
        const count = 2 + Math.floor(this.random() * 3);
        await Promise.all(Array.from({ length: count }, () => send()));
        await send();
        return;
      }
      case 'mismatch':
        await send();
        await send({ payload: plan.otherPayload });
        await send();
        return;
      case 'fail-then-retry':
        await send({ fail: true });
        await send();
        await send();
        return;
      case 'slow-concurrent': {
        const slow = send({ delayMs: this.delay() });
        const duplicates = Array.from({ length: 1 + Math.floor(this.random() * 3) }, () => send());
        await Promise.all([slow, ...duplicates]);
        await send();
        return;
      }
    }
  }
}

/**
 * After the load and its faults: retries every key until it settles, the way
 * well-behaved clients would: with its original body until a success, or a 422 when
 * another body won the key; for a `mismatch` plan a 422 hands over to the other body's
 * client, which retries until its own success (its claim may have failed with the
 * fault and left the key to be taken again). Keys left leased by a crashed process
 * settle once their lease expires. Returns the keys that did not settle before the deadline,
 * each with its last answer.
 */
export async function settleAll(
  client: HarnessClient,
  plans: readonly KeyPlan[],
  options: { deadlineMs: number; concurrency?: number; retryDelayMs?: number },
): Promise<string[]> {
  const deadline = Date.now() + options.deadlineMs;
  const queue = [...plans];
  const unsettled: string[] = [];
  client.phase = 'settle';
  const worker = async () => {
    for (let plan = queue.shift(); plan; plan = queue.shift()) {
      let appIndex = 0;
      let payload = plan.payload;
      for (;;) {
        const outcome = await client.send({ key: plan.key, payload, appIndex: appIndex++ % client.apps.length });
        if (typeof outcome.status === 'number' && outcome.status >= 200 && outcome.status < 300) break;
        if (outcome.status === 422) {
          if (plan.otherPayload === undefined) break;
          payload = payload === plan.payload ? plan.otherPayload : plan.payload;
        }
        if (Date.now() > deadline) {
          // The last answer says why (409: a lease nobody released; 503: the store still down).
          unsettled.push(`${plan.key} (last ${String(outcome.status)})`);
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, options.retryDelayMs ?? 200));
      }
    }
  };
  await Promise.all(Array.from({ length: options.concurrency ?? 16 }, worker));
  return unsettled;
}
