import { execFile } from 'node:child_process';
import { AsyncLocalStorage } from 'node:async_hooks';
import { join } from 'node:path';
import { promisify } from 'node:util';

/**
 * Before Node 24, an entered AsyncLocalStorage keeps a promise hook on for the whole
 * process, and every promise of every route pays for it (docs/performance.md, "What we
 * learned"). The durable steps' context is turned off once no execution is open, and on
 * again by the next one; an execution still open keeps it on while others settle. Checked
 * in a process of its own, by whether a promise reaction gets an async id (only while a
 * hook is on).
 */
const CHILD = join(__dirname, 'fixtures', 'idle-context-child.ts');
const TS_REQUIRE = require.resolve('../support/ts-require.js');
const storagesRunOnHooks = typeof (AsyncLocalStorage.prototype as { _enable?: unknown })._enable === 'function';

describe('the durable steps’ context while no execution is open', () => {
  let seen: Record<string, unknown>;

  beforeAll(async () => {
    const { stdout } = await promisify(execFile)(process.execPath, ['-r', TS_REQUIRE, CHILD], { timeout: 60_000 });
    seen = JSON.parse(stdout.trim().split('\n').pop()!);
  }, 90_000);

  it('steps record under their own execution while another one settles', () => {
    expect(seen).toMatchObject({ first: 'charged', second: 'second charged', third: 'third charged' });
  });

  it('a step of a fail-open run is still refused, never run unrecorded', () => {
    expect(seen.unprotected).toBe('IdempotencyStoreUnavailableError');
  });

  it('leaves no promise hook on once every execution settled, and keeps it while one is open', () => {
    expect(seen.before).toBe(0);
    expect(seen.afterBoth).toBe(0);
    expect(seen.afterUnprotected).toBe(0);
    expect(seen.afterThird).toBe(0);
    if (storagesRunOnHooks) {
      // Node before 24: the context is on while an execution is open.
      expect(seen.insideFirst).not.toBe(0);
      expect(seen.whileFirstOpen).not.toBe(0);
      expect(seen.insideUnprotected).not.toBe(0);
      expect(seen.insideThird).not.toBe(0);
    } else {
      // AsyncContextFrame (Node 24+): no hook at any point.
      expect(seen.insideFirst).toBe(0);
    }
  });
});
