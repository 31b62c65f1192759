import type { ExecutionContext } from '@nestjs/common';
import { IdempotencyConfigurationError, IdempotencyErrorCode, isIdempotencyError, type InFlightStrategy } from '../../../core/index.js';
import { MethodAdapter, type MethodHandlerConfig } from '../method/method.adapter.js';
import type { MethodKind } from '../method/method-target.js';
import { NO_REPLY, type ResolvedHandlerConfig } from '../../transport.adapter.js';

/** The members of @nestjs/schedule's SchedulerRegistry read here (the package is never imported). */
export interface SchedulerRegistryLike {
  getCronJobs(): Map<string, { cronTime?: object }>;
}

/** The members of cron's CronTime read here. */
interface CronTimeLike {
  getNextDateFrom(start: Date, zone: string): { toMillis(): number };
  /** The zone cron resolved (the job's `timeZone`, else the process's own zone); unset with `utcOffset`. */
  readonly timeZone?: string;
}

/** A cron job's parsed schedule and the zone its expression is read in. */
interface CronSchedule {
  readonly cronTime: CronTimeLike;
  readonly zone: string;
}
type CronTimeClass = new (source: unknown, timeZone?: string, utcOffset?: string | number) => CronTimeLike;

/** A tick runs at or after its scheduled time; this much ahead still counts as that tick (timer rounding), ms. */
const EARLY_TOLERANCE_MS = 5;
/** How far back the scheduled time of a late tick is looked for, widening until one is found, ms. */
const LOOKBACKS_MS = [2_000, 120_000, 7_200_000, 2 * 86_400_000, 64 * 86_400_000, 800 * 86_400_000];

/**
 * `@Cron()` and `@Interval()` jobs of @nestjs/schedule run by several instances: the key
 * is the tick, the same on every instance, so that one instance runs each tick and the
 * others skip it. Cron: the scheduled fire time of the tick (not the clock when it ran).
 * Interval: the epoch-aligned period the tick falls in (`floor(now / every) * every`).
 * A duplicate tick (replayed, or still running elsewhere) returns nothing and logs nothing.
 */
export class ScheduleAdapter extends MethodAdapter {
  override readonly name: string = 'schedule';
  override readonly kinds: readonly MethodKind[] = ['cron', 'interval'];
  override readonly defaultInFlight: InFlightStrategy = 'reject';
  protected override readonly defaultKeySource = 'the tick of the schedule';
  protected override readonly keyCall = '';

  /**
   * An application's SchedulerRegistry, found at boot: cron's CronTime class is reached
   * through its jobs, as this library does not depend on cron.
   */
  private registry: SchedulerRegistryLike | undefined;
  private CronTime: CronTimeClass | undefined;
  private readonly schedules = new WeakMap<ResolvedHandlerConfig, CronSchedule>();

  /** @internal called at boot with the application's SchedulerRegistry */
  useRegistry(registry: SchedulerRegistryLike): void {
    this.registry = registry;
  }

  /** Finds the application's SchedulerRegistry (@nestjs/schedule), through which a @Cron() tick's scheduled time is read. */
  boot(providers: readonly unknown[]): void {
    for (const provider of providers) {
      const candidate = provider as (Partial<SchedulerRegistryLike> & { addCronJob?: unknown }) | undefined;
      if (candidate && typeof candidate.getCronJobs === 'function' && typeof candidate.addCronJob === 'function') {
        this.useRegistry(candidate as SchedulerRegistryLike);
        return;
      }
    }
  }

  override readKey(_context: ExecutionContext, config: ResolvedHandlerConfig): unknown {
    const { target } = config as MethodHandlerConfig;
    const now = Date.now();
    if (target.kind === 'interval') {
      const every = target.every ?? 0;
      return new Date(every > 0 ? Math.floor(now / every) * every : now).toISOString();
    }
    return new Date(this.scheduledTimeOf(config as MethodHandlerConfig, now)).toISOString();
  }

  /** Another instance runs this tick: skipped, like a replayed tick (the events still report it). */
  override finish(answer: Promise<unknown>): Promise<unknown> {
    return answer.catch((error: unknown) => {
      if (isIdempotencyError(error) && error.code === IdempotencyErrorCode.InFlight) return undefined;
      throw error;
    });
  }

  override replay(): unknown {
    return NO_REPLY;
  }

  /** The scheduled time of the tick running now: the last fire time of the cron expression at or before now. */
  private scheduledTimeOf(config: MethodHandlerConfig, now: number): number {
    const source = config.target.cron?.cronTime;
    if (source instanceof Date) return source.getTime();
    if (typeof (source as { toMillis?: unknown })?.toMillis === 'function') return (source as { toMillis(): number }).toMillis();
    const { cronTime, zone } = this.scheduleOf(config);
    const limit = now + EARLY_TOLERANCE_MS;
    for (const lookback of LOOKBACKS_MS) {
      let date = cronTime.getNextDateFrom(new Date(limit - lookback), zone).toMillis();
      if (date > limit) continue;
      for (;;) {
        const next = cronTime.getNextDateFrom(new Date(date), zone).toMillis();
        if (next > limit) return date;
        date = next;
      }
    }
    return now;
  }

  private scheduleOf(config: MethodHandlerConfig): CronSchedule {
    let schedule = this.schedules.get(config);
    if (schedule) return schedule;
    // cron's CronTime class is the same for every application: found once, it stays usable
    // after the application whose registry showed it has closed (its jobs are gone then).
    this.CronTime ??= (
      this.registry ? [...this.registry.getCronJobs().values()].find((candidate) => candidate.cronTime)?.cronTime?.constructor : undefined
    ) as CronTimeClass | undefined;
    const CronTime = this.CronTime;
    if (!CronTime) {
      throw new IdempotencyConfigurationError(
        `@Idempotent() on ${config.handlerName}: the scheduled time of this @Cron() tick cannot be read, as no cron job is registered with ScheduleModule.`,
        'Import ScheduleModule.forRoot() in the application that runs this job, or give @Idempotent() a key option of your own.',
      );
    }
    const { cronTime: source, timeZone, utcOffset } = config.target.cron ?? {};
    const cronTime = new CronTime(source, timeZone, utcOffset);
    schedule = { cronTime, zone: zoneOf(config.target.cron, cronTime) };
    this.schedules.set(config, schedule);
    return schedule;
  }
}

/**
 * The zone cron reads the expression in, as its CronJob does: the job's `timeZone`, else
 * its `utcOffset` (minutes) as a fixed `UTC+hh:mm` zone, else the zone of the process
 * (`TZ`, else the system's), which cron's CronTime resolves when it is built. Never UTC
 * by default: on a UTC+2 server, `0 9-17 * * *` read in UTC would give the 09:00 and
 * 10:00 ticks one key, and skip the second.
 */
function zoneOf(cron: { timeZone?: string; utcOffset?: string | number } | undefined, cronTime: CronTimeLike): string {
  if (cron?.timeZone) return cron.timeZone;
  const offset = cron?.utcOffset === undefined || cron.utcOffset === null ? undefined : Number(cron.utcOffset);
  if (offset === undefined || !Number.isFinite(offset)) return cronTime.timeZone || Intl.DateTimeFormat().resolvedOptions().timeZone;
  const hours = Math.trunc(offset / 60);
  const minutes = Math.abs(offset - hours * 60);
  return `UTC${offset < 0 ? '-' : '+'}${String(Math.abs(hours)).padStart(2, '0')}:${String(minutes).padStart(2, '0')}`;
}
