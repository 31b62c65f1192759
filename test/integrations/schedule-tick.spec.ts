import { CronJob } from 'cron';
import { MethodExecutionContext } from '../../lib/nest/transports/method/method-context.js';
import type { MethodHandlerConfig } from '../../lib/nest/transports/method/method.adapter.js';
import type { MethodTarget } from '../../lib/nest/transports/method/method-target.js';
import { ScheduleAdapter } from '../../lib/nest/transports/schedule/schedule.adapter.js';

/** The tick a schedule's key names: every instance must compute the same one. */
const adapter = new ScheduleAdapter();
adapter.useRegistry({
  getCronJobs: () => new Map([['any', CronJob.from({ cronTime: '* * * * *', onTick: () => undefined, start: false })]]),
});

const configOf = (target: Partial<MethodTarget>) =>
  ({ target: { kind: 'cron', handlerName: 'Jobs.run', operation: 'cron run', ...target }, options: {} }) as unknown as MethodHandlerConfig;
const context = new MethodExecutionContext([], Object, () => undefined, 'cron run');

function keyAt(iso: string, target: Partial<MethodTarget>): unknown {
  const now = jest.spyOn(Date, 'now').mockReturnValue(Date.parse(iso));
  try {
    return adapter.readKey(context, configOf(target));
  } finally {
    now.mockRestore();
  }
}

describe('the tick of a schedule', () => {
  const nightly = { cronTime: '0 2 * * *', timeZone: 'Europe/Paris' };

  it("is a cron job's scheduled fire time, in the job's time zone, whenever the tick runs after it", () => {
    // 02:00 in Paris is 01:00 UTC in November.
    expect(keyAt('2026-11-30T01:00:00.004Z', { cron: nightly })).toBe('2026-11-30T01:00:00.000Z');
    expect(keyAt('2026-11-30T01:00:02.500Z', { cron: nightly })).toBe('2026-11-30T01:00:00.000Z');
    expect(keyAt('2026-11-30T00:59:59.000Z', { cron: nightly })).toBe('2026-11-29T01:00:00.000Z');
  });

  it("reads the expression in the process's own zone without a time zone, and at a fixed offset with utcOffset (minutes)", () => {
    // 02:00 on this process's clock, whatever its TZ (schedule-zone.e2e-spec.ts runs processes in named zones).
    const local = new Date(2026, 10, 30, 2, 0, 0).getTime();
    expect(keyAt(new Date(local + 10).toISOString(), { cron: { cronTime: '0 2 * * *' } })).toBe(new Date(local).toISOString());
    expect(keyAt('2026-11-30T00:00:00.010Z', { cron: { cronTime: '0 2 * * *', utcOffset: 120 } })).toBe('2026-11-30T00:00:00.000Z');
  });

  it('keeps second-level expressions apart, and counts a timer a few ms early as its tick', () => {
    expect(keyAt('2026-11-30T10:00:04.999Z', { cron: { cronTime: '*/5 * * * * *' } })).toBe('2026-11-30T10:00:05.000Z');
    expect(keyAt('2026-11-30T10:00:09.300Z', { cron: { cronTime: '*/5 * * * * *' } })).toBe('2026-11-30T10:00:05.000Z');
  });

  it('is the date itself for a job scheduled at a Date', () => {
    expect(keyAt('2026-12-24T18:00:00.300Z', { cron: { cronTime: new Date('2026-12-24T18:00:00Z') } })).toBe('2026-12-24T18:00:00.000Z');
  });

  it("is the epoch-aligned period of an interval, whichever instance's timer fires in it", () => {
    expect(keyAt('2026-11-30T10:00:59.999Z', { kind: 'interval', every: 60_000 })).toBe('2026-11-30T10:00:00.000Z');
    expect(keyAt('2026-11-30T10:00:00.001Z', { kind: 'interval', every: 60_000 })).toBe('2026-11-30T10:00:00.000Z');
    expect(keyAt('2026-11-30T10:01:00.000Z', { kind: 'interval', every: 60_000 })).toBe('2026-11-30T10:01:00.000Z');
  });
});
