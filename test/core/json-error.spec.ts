import { decodeError, deserializeOutcome, encodeJsonError, serializeOutcome } from '../../lib/core/outcome.js';

/** A cached error as a JSON wire stores it (HTTP, GraphQL): what a replay rebuilds for the exception filters. */
describe('encodeJsonError / decodeError', () => {
  class DeclinedError extends RangeError {
    readonly code = 'card_declined';
    at = new Date('2026-01-02T03:04:05.000Z');
  }

  it('keeps the chain, name, message and own fields, each as JSON keeps it; rebuilt on a listed class', () => {
    const encoded = encodeJsonError(new DeclinedError('declined'));
    expect(encoded).toEqual({
      name: 'RangeError',
      message: 'declined',
      chain: ['DeclinedError', 'RangeError', 'Error'],
      fields: { code: 'card_declined', at: '2026-01-02T03:04:05.000Z' },
    });
    const stored = deserializeOutcome(serializeOutcome({ kind: 'error', error: encoded }));
    if (stored.kind !== 'error') throw new Error('expected an error outcome');
    const replayed = decodeError(stored.error, [DeclinedError]);
    expect(replayed).toBeInstanceOf(DeclinedError);
    expect(replayed).toMatchObject({ message: 'declined', code: 'card_declined', at: '2026-01-02T03:04:05.000Z' });
    // Not listed: the nearest built-in class of its chain.
    expect(decodeError(encoded)).toBeInstanceOf(RangeError);
  });

  it('leaves out a field JSON cannot hold (a cycle, a bigint) and keeps the rest, so the record is always written', () => {
    const error = new Error('boom') as Error & Record<string, unknown>;
    error.self = error;
    error.amount = 10n;
    error.kept = { a: 1 };
    const encoded = encodeJsonError(error);
    expect(encoded.fields).toEqual({ kept: { a: 1 } });
    expect(() => serializeOutcome({ kind: 'error', error: encoded })).not.toThrow();
  });

  it('an own name (as HttpException sets one) stays an own enumerable field', () => {
    class Named extends Error {
      constructor() {
        super('x');
        this.name = 'Named';
      }
    }
    const replayed = decodeError(encodeJsonError(new Named()), [Named]);
    expect(Object.keys(replayed)).toContain('name');
    expect(replayed.name).toBe('Named');
  });

  it('a thrown value that is no Error: its text, and an empty chain', () => {
    expect(encodeJsonError('nope')).toEqual({ name: 'Error', message: 'nope', chain: [] });
    const replayed = decodeError(encodeJsonError('nope'));
    expect([replayed.constructor, replayed.message]).toEqual([Error, 'nope']);
  });
});
