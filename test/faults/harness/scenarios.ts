/**
 * The faults every store goes through, under load with duplicates (see run.ts): a stalled
 * path, a slow path (latency per round trip), replies reset mid-way. Each one waits on what
 * the run records (answers of its phase), never on a sleep that must land in a window, and
 * returns its figures for the caller to print or tabulate.
 */
import { expectFaultRun, FaultRun, isSuccess, sleep, untilOutcomes, type FaultReport } from './run.js';

export interface FaultFigures {
  readonly report: FaultReport;
  /** Answers given while the fault was on (by the phase they were sent in). */
  readonly during: { requests: number; unavailable503: number; slowest503Ms: number; slowestMs: number };
  /** The first request after the heal (a key never seen, sent until a success within the bound): status, time, attempts. */
  readonly probe: { status: number | string; durationMs: number; attempts: number };
}

async function warmUp(run: FaultRun): Promise<void> {
  run.startLoad();
  // Enough answers for every instance to have opened its connections (an ioredis Cluster
  // opens and drops several per node in its first second): the faults hit established paths.
  await untilOutcomes(run, (o) => isSuccess(o.status), 40, 15_000, 'successes before the fault');
}

/**
 * How long after the heal of a fault that dropped connections (resets) the probe may be
 * refused: each client is reconnecting with its backoff (recommendedRedisOptions():
 * at most `maxReconnectDelay`, 1 s), then connects and reports ready; until then the
 * store refuses at once, as documented (no offline queue). A slow path drops no
 * connection, so its probe gets one attempt: the path must work at once. Neither does a
 * stall shorter than the clients' socket timeout; a longer one looks like a dead path
 * (a blackhole) to them, so they drop their connections and reconnect after the heal
 * (issue 42): the stall's probe gets this bound too, and a SQL pool needs none of it.
 */
const RECONNECT_BOUND_MS = 2_000;

async function afterHeal(
  run: FaultRun,
  phase: string,
  options: { reconnectMs?: number; settleDeadlineMs?: number } = {},
): Promise<FaultFigures> {
  await run.heal();
  // A request right after the heal: the pool and the connections work at once (no dead
  // one left), or within the reconnection bound after resets.
  const probe = await run.probeUntilSuccess(options.reconnectMs ?? 0);
  const report = await run.finish(options.settleDeadlineMs);
  // Checked first: a probe never answered 201 ran no handler, so it would otherwise show
  // only as one effect short of the keys.
  expect({
    probe: probe.outcome.status,
    context: `${probe.attempts} attempt(s) in ${probe.durationMs} ms; ${run.describe(report)}`,
  }).toEqual({
    probe: 201,
    context: `${probe.attempts} attempt(s) in ${probe.durationMs} ms; ${run.describe(report)}`,
  });
  expectFaultRun(run, report);
  const during = run.outcomesIn(phase).filter((o) => typeof o.status === 'number');
  const unavailable = during.filter((o) => o.status === 503);
  return {
    report,
    during: {
      requests: during.length,
      unavailable503: unavailable.length,
      slowest503Ms: Math.max(0, ...unavailable.map((o) => o.durationMs)),
      slowestMs: Math.max(0, ...during.map((o) => o.durationMs)),
    },
    probe: { status: probe.outcome.status, durationMs: probe.durationMs, attempts: probe.attempts },
  };
}

/**
 * Every path frozen (sockets open, nothing moves) until `answers` requests sent during the
 * stall were answered; each must be answered (a 503 for the claims) within the run's bound.
 */
export async function stalledPath(run: FaultRun, answers = 8): Promise<FaultFigures> {
  await warmUp(run);
  await run.fault('stalled', () => run.store.proxies.forEach((proxy) => proxy.freeze()));
  await untilOutcomes(
    run,
    (o) => o.phase === 'stalled' && o.status === 503,
    answers,
    30_000,
    `${answers} answers to requests sent during the stall`,
  );
  const figures = await afterHeal(run, 'stalled', { reconnectMs: RECONNECT_BOUND_MS });
  expect(figures.during.unavailable503).toBeGreaterThanOrEqual(answers);
  return figures;
}

/**
 * Every reply `ms ± jitterMs` late, for `answers` answers. Nothing may run twice or hang;
 * at most `maxUnavailableShare` of the answers may be 503 (0 by default: nothing may fail).
 */
export async function slowPath(
  run: FaultRun,
  latency = { ms: 200, jitterMs: 50 },
  answers = 30,
  maxUnavailableShare = 0,
): Promise<FaultFigures> {
  await warmUp(run);
  await run.fault('slow', () => run.store.proxies.forEach((proxy) => proxy.latency({ ...latency, direction: 'reply' })));
  await untilOutcomes(run, (o) => o.phase === 'slow', answers, 60_000, `${answers} answers on the slow path`);
  const figures = await afterHeal(run, 'slow');
  const allowed = Math.floor(figures.during.requests * maxUnavailableShare);
  expect({ unavailableWithinShare: figures.during.unavailable503 <= allowed, context: run.describe(figures.report) }).toEqual({
    unavailableWithinShare: true,
    context: run.describe(figures.report),
  });
  return figures;
}

/**
 * Replies cut after `afterBytes` bytes (the connection reset) with chance `probability`
 * each, until `answers` answers: the store ran the statement, the client lost its reply.
 */
export async function resetReplies(run: FaultRun, fault = { afterBytes: 5, probability: 0.25 }, answers = 30): Promise<FaultFigures> {
  await warmUp(run);
  await run.fault('reset', () => run.store.proxies.forEach((proxy) => proxy.resetMidReply({ ...fault, count: Infinity })));
  await untilOutcomes(run, (o) => o.phase === 'reset', answers, 30_000, `${answers} answers while replies are reset`);
  const resets = run.store.proxies.reduce((n, proxy) => n + proxy.stats.reset, 0);
  const figures = await afterHeal(run, 'reset', { reconnectMs: RECONNECT_BOUND_MS });
  expect(resets).toBeGreaterThan(0);
  return figures;
}

/**
 * Longest time from the heal of a blackhole to a new key's 201 (issue 42): each client
 * has to notice that its connections are dead (a socket timeout, the store's watchdog, a
 * pool that destroys what a deadline caught), then reconnect.
 */
export const BLACKHOLE_RECOVERY_BOUND_MS = 5_000;

/**
 * Every path blackholed (the bytes of the open connections, and of those made during the
 * fault, dropped for good) until `answers` requests sent during it were answered and, when
 * the clients reconnect meanwhile, until a connection made during the fault was caught
 * too (at most `reconnectWaitMs`); then the heal. A new key must get its 201 within
 * `BLACKHOLE_RECOVERY_BOUND_MS`: the figures' `probe.durationMs` is the time to recovery.
 */
export async function blackholedPath(run: FaultRun, answers = 8, reconnectWaitMs = 8_000): Promise<FaultFigures> {
  await warmUp(run);
  const blackholed = () => run.store.proxies.reduce((n, proxy) => n + proxy.stats.blackholed, 0);
  let caughtOpen = 0;
  await run.fault('blackhole', () => {
    run.store.proxies.forEach((proxy) => proxy.blackhole());
    caughtOpen = blackholed();
  });
  await untilOutcomes(run, (o) => o.phase === 'blackhole' && o.status === 503, answers, 30_000, `${answers} answers during the blackhole`);
  const deadline = Date.now() + reconnectWaitMs;
  while (blackholed() === caughtOpen && Date.now() < deadline) await sleep(20);
  const figures = await afterHeal(run, 'blackhole', { reconnectMs: BLACKHOLE_RECOVERY_BOUND_MS });
  expect(figures.during.unavailable503).toBeGreaterThanOrEqual(answers);
  return figures;
}

/** One line of figures, for a test's output and the notes. */
export function figuresLine(name: string, fault: string, figures: FaultFigures): string {
  const { during, probe, report } = figures;
  return (
    `${name} ${fault}: during=${during.requests} answers, ${during.unavailable503}×503 (slowest 503 ${during.slowest503Ms} ms, slowest answer ${during.slowestMs} ms); ` +
    `probe after heal ${probe.status} in ${probe.durationMs} ms (${probe.attempts} attempt(s)); keys=${report.stats.keys} effects=${report.stats.effects} violations=${report.violations.length}`
  );
}
