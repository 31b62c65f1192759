/**
 * The invariant, checked after the fact from what really happened (the effect logs
 * the handlers appended to) against what clients were told (every recorded outcome):
 *
 * 1. every key's effect happened at most once;
 * 2. a key that got a success has exactly one effect, and that success carries the id
 *    of that very effect (so it is the first execution's response or its replay);
 * 3. every success returned for one key is byte-identical;
 * 4. no answer is outside the protocol (a 500, a 400 for a valid key, ...).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { isSuccess, type Outcome } from './client.js';

export interface Effect {
  readonly key: string;
  readonly effectId: string;
  readonly app: string;
  readonly pid: number;
}

export interface InvariantReport {
  readonly violations: string[];
  readonly stats: HarnessStats;
}

export interface HarnessStats {
  requests: number;
  keys: number;
  effects: number;
  successes: number;
  /** Requests that did not run the handler again because of the key: replays, 409 in flight, 422 mismatch. */
  duplicatesAbsorbed: number;
  replays: number;
  inFlight409: number;
  mismatch422: number;
  injectedFailures502: number;
  unavailable503: number;
  networkErrors: number;
  timeouts: number;
  /** Slowest answer per status class, ms (how fast a 503 is during an outage). */
  slowest503Ms: number;
}

/** Statuses the protocol may answer in this harness; anything else is a violation. */
const EXPECTED_STATUSES = new Set([200, 201, 409, 422, 502, 503]);

/** Reads every `effects-*.log` under `dir` (lines from every process, killed ones included). */
export function readEffects(dir: string): Effect[] {
  const effects: Effect[] = [];
  for (const file of readdirSync(dir)) {
    if (!file.startsWith('effects-')) continue;
    for (const line of readFileSync(join(dir, file), 'utf8').split('\n')) {
      // A SIGKILL can cut a line short only if it lands inside one write(2); a partial line is not a whole effect.
      if (line.trim()) effects.push(JSON.parse(line) as Effect);
    }
  }
  return effects;
}

export function checkInvariant(effects: readonly Effect[], outcomes: readonly Outcome[]): InvariantReport {
  const violations: string[] = [];
  const effectsByKey = new Map<string, Effect[]>();
  for (const effect of effects) {
    const list = effectsByKey.get(effect.key) ?? [];
    list.push(effect);
    effectsByKey.set(effect.key, list);
  }
  const outcomesByKey = new Map<string, Outcome[]>();
  for (const outcome of outcomes) {
    const list = outcomesByKey.get(outcome.key) ?? [];
    list.push(outcome);
    outcomesByKey.set(outcome.key, list);
  }
  const stats: HarnessStats = {
    requests: outcomes.length,
    keys: outcomesByKey.size,
    effects: effects.length,
    successes: 0,
    duplicatesAbsorbed: 0,
    replays: 0,
    inFlight409: 0,
    mismatch422: 0,
    injectedFailures502: 0,
    unavailable503: 0,
    networkErrors: 0,
    timeouts: 0,
    slowest503Ms: 0,
  };

  for (const outcome of outcomes) {
    if (outcome.status === 'timeout') stats.timeouts++;
    else if (outcome.status === 'network') stats.networkErrors++;
    else {
      if (isSuccess(outcome.status)) stats.successes++;
      if (outcome.replayed) stats.replays++;
      if (outcome.status === 409) stats.inFlight409++;
      if (outcome.status === 422) stats.mismatch422++;
      if (outcome.status === 502) stats.injectedFailures502++;
      if (outcome.status === 503) {
        stats.unavailable503++;
        stats.slowest503Ms = Math.max(stats.slowest503Ms, outcome.durationMs);
      }
      if (!EXPECTED_STATUSES.has(outcome.status)) {
        violations.push(
          `${outcome.key}: unexpected status ${outcome.status} from ${outcome.app} (${outcome.phase}): ${outcome.body.slice(0, 300)}`,
        );
      }
    }
  }
  stats.duplicatesAbsorbed = stats.replays + stats.inFlight409 + stats.mismatch422;

  for (const [key, keyEffects] of effectsByKey) {
    if (keyEffects.length > 1) {
      violations.push(`${key}: effect happened ${keyEffects.length} times (${keyEffects.map((e) => `${e.app}/${e.pid}`).join(', ')})`);
    }
  }
  for (const [key, keyOutcomes] of outcomesByKey) {
    const successes = keyOutcomes.filter((o) => isSuccess(o.status));
    if (successes.length === 0) continue;
    const keyEffects = effectsByKey.get(key) ?? [];
    if (keyEffects.length !== 1) {
      violations.push(`${key}: ${successes.length} success(es) but ${keyEffects.length} effect(s)`);
      continue;
    }
    const first = successes[0].body;
    if (successes.some((o) => o.body !== first)) {
      violations.push(`${key}: successes differ: ${[...new Set(successes.map((o) => o.body))].join(' | ')}`);
    }
    let effectId: unknown;
    try {
      effectId = (JSON.parse(first) as { effectId?: unknown }).effectId;
    } catch {
      effectId = undefined;
    }
    if (effectId !== keyEffects[0].effectId) {
      violations.push(`${key}: success carries effect ${String(effectId)} but the logged effect is ${keyEffects[0].effectId}`);
    }
  }
  return { violations, stats };
}

export function formatStats(stats: HarnessStats): string {
  return Object.entries(stats)
    .map(([name, value]) => `${name}=${value}`)
    .join(' ');
}
