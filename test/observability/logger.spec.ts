import type { LoggerService } from '@nestjs/common';
import { MemoryIdempotencyStore, makeIdempotent, type IdempotencyEvent } from '../../lib/index.js';
import { combineListeners, createIdempotencyLogger, formatIdempotencyEvent } from '../../lib/observability/index.js';
import { IdempotencyEngine } from '../../lib/core/engine.js';
import { listenedTypesOf, listeningTo } from '../../lib/core/listened-types.js';

/** A LoggerService that keeps its lines, as an app's logger adapter would receive them. */
class RecordingLogger implements LoggerService {
  lines: Array<{ level: string; message: string; extra: unknown[] }> = [];
  log = (message: string, ...extra: unknown[]) => this.lines.push({ level: 'log', message, extra });
  warn = (message: string, ...extra: unknown[]) => this.lines.push({ level: 'warn', message, extra });
  error = (message: string, ...extra: unknown[]) => this.lines.push({ level: 'error', message, extra });
  debug = (message: string, ...extra: unknown[]) => this.lines.push({ level: 'debug', message, extra });
  verbose = (message: string, ...extra: unknown[]) => this.lines.push({ level: 'verbose', message, extra });
}

const rawKey = `secret-client-key-${process.pid}-${Date.now()}`;

describe('createIdempotencyLogger', () => {
  it('logs each outcome at its level with the hashed key, never the raw one', async () => {
    const logger = new RecordingLogger();
    const charge = makeIdempotent(async (_key: string, amount: number) => ({ amount }), {
      store: new MemoryIdempotencyStore(),
      key: (key) => key,
      scope: 'logger-test',
      fingerprint: (_key, amount) => amount,
      onEvent: createIdempotencyLogger({ logger }),
    });
    await charge(rawKey, 1);
    await charge(rawKey, 1);
    await expect(charge(rawKey, 2)).rejects.toMatchObject({ code: 'IDEMPOTENCY_FINGERPRINT_MISMATCH' });

    expect(logger.lines.map((l) => [l.level, l.message.split(' ')[0]])).toEqual([
      ['debug', 'claimed'],
      ['debug', 'completed'],
      ['log', 'replayed'],
      ['warn', 'fingerprint_mismatch'],
    ]);
    const all = JSON.stringify(logger.lines);
    expect(all).not.toContain(rawKey);
    expect(logger.lines[2].message).toMatch(/^replayed logger-test key=[A-Za-z0-9_-]{43} in \d+ ms \(store \d+ ms\)$/);
  });

  it('logs store errors at error level with the stack, and honours levels overrides', async () => {
    const logger = new RecordingLogger();
    const listener = createIdempotencyLogger({ logger, levels: { store_error: 'fatal', replayed: false } });
    const error = new Error('connect ECONNREFUSED 127.0.0.1:6390');
    listener({
      type: 'store_error',
      key: 'abc',
      handler: 'Payments.charge',
      at: 1,
      durationMs: 2,
      storeLatencyMs: 1,
      error,
      failOpen: true,
    });
    listener({ type: 'replayed', key: 'abc', at: 1, durationMs: 2 });
    expect(logger.lines).toHaveLength(1);
    // LoggerService without fatal(): falls back to error().
    expect(logger.lines[0]).toMatchObject({ level: 'error' });
    expect(logger.lines[0].message).toBe(
      'store_error Payments.charge key=abc in 2 ms (store 1 ms) fail-open: the handler ran unprotected: Error: connect ECONNREFUSED 127.0.0.1:6390',
    );

    const errors = new RecordingLogger();
    createIdempotencyLogger({ logger: errors })({ type: 'lease_lost', key: 'k', at: 1, durationMs: 1, error });
    expect(errors.lines[0].level).toBe('error');
    expect(errors.lines[0].extra[0]).toBe(error.stack);
  });

  it('formats the reason of a response that cannot be stored', () => {
    const event: IdempotencyEvent = {
      type: 'response_not_storable',
      key: 'k',
      handler: 'H.m',
      at: 1,
      durationMs: 5,
      reason: 'the response is a stream',
    };
    expect(formatIdempotencyEvent(event)).toBe('response_not_storable H.m key=k in 5 ms: the response is a stream');
  });
});

describe('combineListeners', () => {
  it('feeds every listener, in order, even when one throws', async () => {
    const seen: string[] = [];
    const combined = combineListeners(
      (e) => seen.push('a:' + e.type),
      undefined,
      () => {
        throw new Error('faulty listener');
      },
      false,
      (e) => seen.push('b:' + e.type),
    );
    const f = makeIdempotent(async () => 1, { store: new MemoryIdempotencyStore(), key: () => 'k', scope: 'combine', onEvent: combined });
    await f();
    expect(seen).toEqual(['a:claimed', 'b:claimed', 'a:completed', 'b:completed']);
  });

  it('returns the listener itself when only one is given', () => {
    const only = () => undefined;
    expect(combineListeners(undefined, only)).toBe(only);
  });

  it('builds no event that no listener reads, and still every event a plain listener reads', async () => {
    // The module's default log reads three rare types: requests must not pay for the rest.
    const rare: string[] = [];
    const onlyRare = listeningTo((e) => rare.push(e.type), ['store_error', 'lease_lost']);
    const engine = new IdempotencyEngine();
    const policy = {
      store: new MemoryIdempotencyStore(),
      ttl: 60_000,
      leaseTtl: 30_000,
      waitTimeout: 0,
      inFlight: 'reject' as const,
      onStoreError: 'fail-closed' as const,
      maxResponseBytes: 1_048_576,
    };
    let built = 0;
    await engine.execute({ key: 'quiet' }, { ...policy, onEvent: onlyRare }, async () => 1);
    await engine.execute({ key: 'quiet' }, { ...policy, onEvent: onlyRare }, async () => 1);
    const quiet = combineListeners(
      onlyRare,
      listeningTo(() => built++, ['lease_lost']),
    );
    await engine.execute({ key: 'quiet-2' }, { ...policy, onEvent: quiet }, async () => 1);
    expect(rare).toEqual([]);
    expect(built).toBe(0);
    expect([...listenedTypesOf(quiet)!].sort()).toEqual(['lease_lost', 'store_error']);

    // One listener without the mark makes the combination hear everything again (a
    // marked listener must still ignore what it does not read, as the default log does).
    const all: string[] = [];
    const loud = combineListeners(onlyRare, (e) => all.push(e.type));
    expect(listenedTypesOf(loud)).toBeUndefined();
    await engine.execute({ key: 'loud' }, { ...policy, onEvent: loud }, async () => 1);
    await engine.execute({ key: 'loud' }, { ...policy, onEvent: loud }, async () => 1);
    expect(all).toEqual(['claimed', 'completed', 'replayed']);
  });
});
