import { Injectable, Module, type INestApplicationContext, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, Interval, ScheduleModule, SchedulerRegistry } from '@nestjs/schedule';
import { Idempotent, IdempotencyModule } from '../../lib/index.js';
import { Effects } from '../support/effects.js';
import { StepProbe } from './steps.js';
import type { Answer, ConformanceDriver, ConformanceStore, SameNamesApp } from './conformance.js';

/**
 * @nestjs/schedule jobs with the default key, the tick: `@Cron('* * * * * *')` and
 * `@Interval(1000)`, so a tick is one second. The jobs' own timers are stopped after boot
 * and each tick is run by calling the job's method, as the scheduler does; a conformance
 * key stands for one tick (a second of its own, started fresh), and every call with that
 * key must land in that second (the driver says so if it did not). A job's caller (the
 * scheduler) gets nothing back: what it "saw" is whether the job ran.
 */
export type ScheduleKind = 'cron' | 'interval';

export interface ScheduleSeen {
  /** What the job's method returned to the scheduler. */
  readonly returned: unknown;
  /** What the job recorded when it ran during this call; undefined when the tick was skipped. */
  readonly ran: Answer | undefined;
  readonly error?: unknown;
}

const TICK_MS = 1000;
/** A tick is started no later than this far into its second, so that its calls stay in it. */
const FRESH_WITHIN_MS = 400;

/** Maps each conformance key to a tick (a second) of its own. */
class Ticks {
  private readonly ticks = new Map<string, number>();
  private last = 0;

  async enter(key: string): Promise<void> {
    const tick = this.ticks.get(key);
    if (tick !== undefined) {
      const now = Math.floor(Date.now() / TICK_MS);
      if (now !== tick)
        throw new Error(
          `the calls with key ${key} did not fit in one tick (${tick} s, now ${now} s): the machine is too slow for this driver`,
        );
      return;
    }
    const deadline = Date.now() + 5_000;
    for (;;) {
      const now = Date.now();
      if (Math.floor(now / TICK_MS) > this.last && now % TICK_MS < FRESH_WITHIN_MS) break;
      if (now > deadline) throw new Error('no fresh tick within 5 s');
      await new Promise((resolve) => setTimeout(resolve, Math.min(20, TICK_MS - (now % TICK_MS) + 1)));
    }
    this.last = Math.floor(Date.now() / TICK_MS);
    this.ticks.set(key, this.last);
  }
}

type JobClass = Type<{ run(): Promise<void> }>;

function jobModule(kind: ScheduleKind, effects: Effects, log: Answer[], name: string | undefined, operation: string, probe?: StepProbe) {
  const schedule = kind === 'cron' ? Cron('* * * * * *', name ? { name } : {}) : name ? Interval(name, TICK_MS) : Interval(TICK_MS);
  /** Every feature module names its job class SettlementJob. */
  @Injectable()
  class SettlementJob {
    @schedule
    @Idempotent()
    async run(): Promise<void> {
      if (probe) await probe.run();
      log.push({ operation, run: effects.hit(operation) });
    }
  }
  @Module({ providers: [SettlementJob] })
  class FeatureModule {}
  return { module: FeatureModule, job: SettlementJob as JobClass };
}

async function start(store: ConformanceStore, modules: Type<unknown>[]): Promise<INestApplicationContext> {
  @Module({ imports: [IdempotencyModule.forRoot({ store, logger: false, isGlobal: true }), ScheduleModule.forRoot(), ...modules] })
  class AppModule {}
  const app = await NestFactory.createApplicationContext(AppModule, { logger: false, abortOnError: false });
  try {
    await app.init();
  } catch (error) {
    await app.close().catch(() => undefined);
    throw error;
  }
  // The test runs the ticks: the scheduler's own timers would add runs of their own.
  const registry = app.get(SchedulerRegistry);
  for (const job of registry.getCronJobs().values()) void job.stop();
  for (const interval of registry.getIntervals()) registry.deleteInterval(interval);
  return app;
}

async function tick(app: INestApplicationContext, job: JobClass, log: Answer[]): Promise<ScheduleSeen> {
  const before = log.length;
  try {
    const returned = await app.get(job).run();
    return { returned, ran: log[before] };
  } catch (error) {
    return { returned: undefined, ran: log[before], error };
  }
}

export function scheduleDriver(kind: ScheduleKind): ConformanceDriver<undefined, ScheduleSeen> {
  const effects = new Effects();
  const log: Answer[] = [];
  const ticks = new Ticks();
  const stepProbe = new StepProbe();
  const jobs = {
    billing: jobModule(kind, effects, log, 'conf-billing-settlement', 'billing'),
    shipping: jobModule(kind, effects, log, 'conf-shipping-settlement', 'shipping'),
    steps: jobModule(kind, effects, log, 'conf-steps-settlement', 'steps', stepProbe),
  };
  let app: INestApplicationContext;

  return {
    entry: kind,
    async boot(store) {
      app = await start(store, [jobs.billing.module, jobs.shipping.module, jobs.steps.module]);
    },
    close: () => app.close(),
    async call({ operation, key }) {
      if (key === undefined) throw new Error('a tick always has a key');
      await ticks.enter(key);
      return tick(app, jobs[operation as keyof typeof jobs].job, log);
    },
    answerOf(seen) {
      if (seen.error) throw new Error(`expected the job to run, it threw ${String(seen.error)}`);
      if (!seen.ran) throw new Error('expected the job to run, the tick was skipped');
      return seen.ran;
    },
    refusalOf(seen) {
      if (seen.error) throw new Error(`a tick is never refused with an error, the scheduler got ${String(seen.error)}`);
      return undefined;
    },
    expectRefusalShape() {
      throw new Error('a tick has no refusal shape');
    },
    runs: (operation) => effects.count(operation),
    input: undefined,
    principals: { notApplicable: 'a tick has no caller and no principal (docs/concepts.md: no principal outside requests)' },
    operations: [
      { name: 'two jobs whose classes share a name (SettlementJob in two modules), each with its name', a: 'billing', b: 'shipping' },
    ],
    sameClassNames: [
      {
        name: 'two jobs named SettlementJob.run in two modules, without a schedule name',
        async boot(store): Promise<SameNamesApp<ScheduleSeen>> {
          const one = jobModule(kind, effects, log, undefined, 'one');
          const two = jobModule(kind, effects, log, undefined, 'two');
          const ambiguous = await start(store, [one.module, two.module]);
          return {
            async call(which, key) {
              await ticks.enter(key);
              return tick(ambiguous, (which === 'a' ? one : two).job, log);
            },
            close: () => ambiguous.close(),
          };
        },
      },
    ],
    inputs: { notApplicable: 'a tick has no input: its fingerprint is off (method-runner.ts), its key is the tick' },
    replays: [
      {
        name: 'a duplicate tick is skipped: the scheduler gets nothing back, as the first time',
        operation: 'billing',
        input: undefined,
        expectSame(first, replay) {
          expect(first.ran).toBeDefined();
          expect(replay).toEqual({ returned: undefined, ran: undefined });
          expect(first.returned).toBeUndefined();
        },
      },
    ],
    steps: { operation: 'steps', probe: stepProbe },
    inFlight: { notApplicable: 'a tick that meets a running one elsewhere is skipped silently (callWithoutRequest)' },
    refusals: {
      notApplicable: 'a tick is never refused with an error: a duplicate or concurrent tick is skipped silently (ScheduleAdapter)',
    },
  };
}
