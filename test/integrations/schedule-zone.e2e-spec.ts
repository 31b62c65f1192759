import { execFile, fork } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { ZoneCase, ZoneReport } from './fixtures/schedule-zone-ticks.js';

/**
 * The tick of a `@Cron()` job is read in the zone cron fires it in: the `timeZone`
 * option, else `utcOffset`, else the process's own zone (TZ). A process's zone is fixed
 * when Node starts, so each zone runs in a child process of its own.
 */
const TICKS = join(__dirname, 'fixtures', 'schedule-zone-ticks.ts');
const APP = join(__dirname, 'fixtures', 'schedule-zone-app.ts');
const TS_REQUIRE = join(__dirname, '..', 'support', 'ts-require.js');

async function ticksIn(tz: string, cases: ZoneCase[]): Promise<ZoneReport> {
  const { stdout } = await promisify(execFile)(process.execPath, ['--require', TS_REQUIRE, TICKS], {
    env: { ...process.env, TZ: tz, ZONE_CASES: JSON.stringify(cases) },
    timeout: 60_000,
  });
  return JSON.parse(stdout) as ZoneReport;
}

const fires = (ticks: ZoneReport['ticks'][number]) => ticks.map((tick) => tick.fire);
/** Every tick's key, whether it ran 3 ms early, on time, 3 ms or 1.5 s late, or half-way to the next tick, is the time cron fired it. */
const misread = (report: ZoneReport) => report.ticks.flat().filter((tick) => tick.keys.some((key) => key !== tick.fire));

describe('the tick of a @Cron() job in the zone cron fires it in', () => {
  it('TZ=Europe/Berlin, no timeZone: each hour of 0 9-17 * * 1-5 is its own tick, and so are both 02:00 of the autumn night', async () => {
    const report = await ticksIn('Europe/Berlin', [
      // Monday 1 June 2026, UTC+2: 09:00 is 07:00 UTC.
      { expression: '0 9-17 * * 1-5', from: '2026-06-01T06:30:00Z', to: '2026-06-01T16:30:00Z' },
      // 25 October 2026: 03:00 CEST goes back to 02:00 CET; cron fires 02:00 twice.
      { expression: '0 * * * *', from: '2026-10-24T22:30:00Z', to: '2026-10-25T02:30:00Z' },
      { expression: '*/30 * * * *', from: '2026-10-24T23:50:00Z', to: '2026-10-25T01:40:00Z' },
      // 29 March 2026: 02:00 CET jumps to 03:00 CEST; cron fires the missing 02:30 at 03:00.
      { expression: '30 2 * * *', from: '2026-03-28T12:00:00Z', to: '2026-03-30T12:00:00Z' },
      // The options win over the process's zone.
      { expression: '0 9 * * *', timeZone: 'Asia/Kathmandu', from: '2026-06-01T00:00:00Z', to: '2026-06-02T12:00:00Z' },
      { expression: '0 9 * * *', utcOffset: 345, from: '2026-06-01T00:00:00Z', to: '2026-06-01T12:00:00Z' },
    ]);
    expect({ zone: report.zone, offset: report.offset }).toEqual({ zone: 'Europe/Berlin', offset: 120 });
    const [office, hourly, halfHourly, spring, kathmandu, offset] = report.ticks;
    expect(fires(office)).toEqual([7, 8, 9, 10, 11, 12, 13, 14, 15].map((h) => `2026-06-01T${String(h).padStart(2, '0')}:00:00.000Z`));
    expect(hourly.map((tick) => tick.local)).toEqual([
      '2026-10-25T01:00:00.000+02:00',
      '2026-10-25T02:00:00.000+02:00',
      '2026-10-25T02:00:00.000+01:00',
      '2026-10-25T03:00:00.000+01:00',
    ]);
    expect(fires(halfHourly)).toEqual([
      '2026-10-25T00:00:00.000Z',
      '2026-10-25T00:30:00.000Z',
      '2026-10-25T01:00:00.000Z',
      '2026-10-25T01:30:00.000Z',
    ]);
    expect(spring.map((tick) => tick.local)).toEqual(['2026-03-29T03:00:00.000+02:00', '2026-03-30T02:30:00.000+02:00']);
    expect(fires(kathmandu)).toEqual(['2026-06-01T03:15:00.000Z', '2026-06-02T03:15:00.000Z']);
    expect(fires(offset)).toEqual(['2026-06-01T03:15:00.000Z']);
    expect(misread(report)).toEqual([]);
  }, 60_000);

  it('TZ=Asia/Kathmandu (+05:45), no timeZone: the ticks are read at +05:45, hours and minutes', async () => {
    const report = await ticksIn('Asia/Kathmandu', [
      { expression: '0 9-17 * * 1-5', from: '2026-06-01T03:00:00Z', to: '2026-06-01T12:00:00Z' },
      { expression: '0 0 * * *', from: '2026-06-01T00:00:00Z', to: '2026-06-03T00:00:00Z' },
      { expression: '*/20 * * * *', from: '2026-06-01T03:00:00Z', to: '2026-06-01T04:00:00Z' },
      // A timeZone option with DST, in a process without DST: 02:00 of the autumn night fires once.
      { expression: '0 2 * * *', timeZone: 'Europe/Berlin', from: '2026-10-24T12:00:00Z', to: '2026-10-26T12:00:00Z' },
    ]);
    expect(report.offset).toBe(345);
    const [office, midnight, thrice, berlin] = report.ticks;
    expect(fires(office)).toEqual([3, 4, 5, 6, 7, 8, 9, 10, 11].map((h) => `2026-06-01T${String(h).padStart(2, '0')}:15:00.000Z`));
    expect(fires(midnight)).toEqual(['2026-06-01T18:15:00.000Z', '2026-06-02T18:15:00.000Z']);
    expect(fires(thrice)).toEqual(['2026-06-01T03:15:00.000Z', '2026-06-01T03:35:00.000Z', '2026-06-01T03:55:00.000Z']);
    expect(fires(berlin)).toEqual(['2026-10-25T00:00:00.000Z', '2026-10-26T01:00:00.000Z']);
    expect(misread(report)).toEqual([]);
  }, 60_000);

  it('runs every tick of a real Nest @Cron() job without timeZone in a TZ=Asia/Kathmandu process, each under its own key', async () => {
    const child = fork(APP, [], {
      execArgv: ['--require', TS_REQUIRE],
      env: { ...process.env, TZ: 'Asia/Kathmandu', RUNS: '3', DEADLINE_MS: '10000' },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const [result] = (await Promise.race([
      new Promise((resolve) => child.once('message', (message) => resolve([message]))),
      new Promise((_, reject) =>
        child.once('exit', (code) => reject(new Error(`the application process exited (${code}) without reporting`))),
      ),
    ])) as [{ offset: number; expression: string; runs: number[]; executed: string[] }];
    await new Promise((resolve) => (child.exitCode === null ? child.once('exit', resolve) : resolve(undefined)));
    expect(result.offset).toBe(345);
    // Read in UTC, the local hour's ticks would all be one past tick: one run, then none.
    expect(result.runs).toHaveLength(3);
    expect(new Set(result.executed).size).toBe(3);
  }, 60_000);
});
