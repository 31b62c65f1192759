import type { Outcome } from './harness/client.js';
import { checkInvariant, type Effect } from './harness/invariant.js';

// The checker must catch what it is there to catch: the harness specs are only as
// strong as this function.
describe('invariant checker', () => {
  const effect = (key: string, effectId: string): Effect => ({ key, effectId, app: 'app0', pid: 1 });
  const outcome = (key: string, status: Outcome['status'], body = '', replayed = false): Outcome => ({
    key,
    app: 'app0',
    status,
    body,
    replayed,
    startedAt: 0,
    durationMs: 1,
    phase: 'load',
  });
  const success = (key: string, effectId: string, replayed = false) => outcome(key, 201, JSON.stringify({ key, effectId }), replayed);

  it('accepts one effect per key with identical successes, replays, conflicts and 503s', () => {
    const report = checkInvariant(
      [effect('a', 'e1'), effect('b', 'e2')],
      [
        success('a', 'e1'),
        success('a', 'e1', true),
        outcome('a', 409),
        outcome('a', 422),
        outcome('b', 503),
        success('b', 'e2'),
        outcome('c', 502),
        outcome('c', 'network'),
      ],
    );
    expect(report.violations).toEqual([]);
    expect(report.stats).toMatchObject({
      requests: 8,
      keys: 3,
      effects: 2,
      successes: 3,
      replays: 1,
      duplicatesAbsorbed: 3,
      unavailable503: 1,
      networkErrors: 1,
    });
  });

  it('flags an effect that happened twice', () => {
    const report = checkInvariant([effect('a', 'e1'), effect('a', 'e2')], [outcome('a', 'network')]);
    expect(report.violations).toEqual([expect.stringContaining('a: effect happened 2 times')]);
  });

  it('flags successes that differ, and a success that is not the logged effect', () => {
    expect(checkInvariant([effect('a', 'e1')], [success('a', 'e1'), success('a', 'e9')]).violations).toEqual([
      expect.stringContaining('successes differ'),
    ]);
    expect(checkInvariant([effect('a', 'e1')], [success('a', 'e9')]).violations).toEqual([
      expect.stringContaining('success carries effect e9'),
    ]);
  });

  it('flags a success without an effect, and answers outside the protocol', () => {
    expect(checkInvariant([], [success('a', 'e1')]).violations).toEqual([expect.stringContaining('1 success(es) but 0 effect(s)')]);
    expect(checkInvariant([], [outcome('a', 500, 'Internal server error')]).violations).toEqual([
      expect.stringContaining('unexpected status 500'),
    ]);
    expect(checkInvariant([], [outcome('a', 400)]).violations).toEqual([expect.stringContaining('unexpected status 400')]);
  });
});
