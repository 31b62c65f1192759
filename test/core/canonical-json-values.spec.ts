import * as querystring from 'node:querystring';
import fc from 'fast-check';
import { canonicalJson, fingerprintOf, withoutTrailingUndefined } from '../../lib/core/hash';
import { IdempotencyConfigurationError } from '../../lib/core/errors';
import { MemoryIdempotencyStore, makeIdempotent } from '../../lib/index.js';

/**
 * Fingerprints of what is not JSON data (service-method arguments, makeIdempotent's
 * `fingerprint: true`, run()'s `fingerprint` option): distinct inputs never share one,
 * and JSON data (every HTTP and message body) fingerprints exactly as in 0.4.0.
 */

/** The documented canonical form of JSON data: JSON with sorted keys, -0 kept apart from 0. */
function reference(value: unknown): string {
  if (value === null) return 'null';
  if (typeof value === 'number') return Object.is(value, -0) ? '-0' : JSON.stringify(value);
  if (typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return '[' + value.map(reference).join(',') + ']';
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record)
    .filter((key) => record[key] !== undefined)
    .sort();
  return '{' + keys.map((key) => JSON.stringify(key) + ':' + reference(record[key])).join(',') + '}';
}

describe('canonicalJson of values JSON cannot carry', () => {
  it('never lets two distinct Maps, Sets or URLSearchParams fingerprint alike, nor like {}', () => {
    const distinct: unknown[] = [
      {},
      new Map(),
      new Map([['a', 1]]),
      new Map([['a', 2]]),
      new Map([[1, 1]]),
      new Set(),
      new Set([1]),
      new Set(['1']),
      new URLSearchParams('a=1'),
      new URLSearchParams('a=2'),
      { a: 1 },
      [['a', 1]],
    ];
    const fingerprints = new Set(distinct.map((value) => fingerprintOf([value])));
    expect(fingerprints.size).toBe(distinct.length);
  });

  it('fingerprints Maps and Sets by content, whatever their insertion order', () => {
    expect(
      canonicalJson(
        new Map<unknown, unknown>([
          ['b', 2],
          ['a', 1],
        ]),
      ),
    ).toBe(
      canonicalJson(
        new Map<unknown, unknown>([
          ['a', 1],
          ['b', 2],
        ]),
      ),
    );
    expect(canonicalJson(new Set([3, 1, 2]))).toBe(canonicalJson(new Set([1, 2, 3])));
    expect(canonicalJson(new Map([['k', { y: 1, x: 2 }]]))).toBe('Map[["k",{"x":2,"y":1}]]');
  });

  it('keeps a Date apart from its ISO string, a Buffer from its base64 text, and typed arrays apart by type', () => {
    const at = new Date(0);
    const distinct: unknown[] = [
      at,
      at.toISOString(),
      new Date(1),
      new Date(NaN),
      null,
      Buffer.from('hi'),
      'b64:aGk=',
      'aGk=',
      new Uint16Array([0x6968]),
      new Int8Array([0x68, 0x69]),
      new Uint8Array([0x68, 0x69]).buffer,
      10n,
      10,
      '10',
      new Number(10),
      /a/g,
      '/a/g',
      new Error('declined'),
      new Error('expired'),
      new TypeError('declined'),
    ];
    const fingerprints = new Set(distinct.map((value) => fingerprintOf({ value })));
    expect(fingerprints.size).toBe(distinct.length);
    // A Buffer and a Uint8Array of the same bytes are the same input.
    expect(canonicalJson(Buffer.from('hi'))).toBe(canonicalJson(new Uint8Array([0x68, 0x69])));
  });

  it('refuses a class instance whose state it cannot see (#private fields), with the fix, instead of fingerprinting it as {}', () => {
    class Amount {
      readonly #cents: number;
      constructor(cents: number) {
        this.#cents = cents;
      }
      get cents(): number {
        return this.#cents;
      }
    }
    expect(() => fingerprintOf([new Amount(1)])).toThrow(IdempotencyConfigurationError);
    expect(() => fingerprintOf([new Amount(1)])).toThrow(/instance of Amount.*toJSON\(\)/);
    expect(() => fingerprintOf({ pending: Promise.resolve(1) })).toThrow(/instance of Promise/);
    class Visible {
      constructor(readonly cents: number) {}
    }
    // A class instance with fields fingerprints like the plain object of its fields, as in 0.4.0.
    expect(fingerprintOf([new Visible(1)])).toBe(fingerprintOf([{ cents: 1 }]));
    class WithJson {
      readonly #cents = 5;
      toJSON() {
        return { cents: this.#cents };
      }
    }
    expect(fingerprintOf(new WithJson())).toBe(fingerprintOf({ cents: 5 }));
  });

  it('writes JSON data exactly as before, so the fingerprints of stored HTTP and message records stay valid', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(canonicalJson(value)).toBe(reference(value));
      }),
      { numRuns: 1000 },
    );
    // Computed with 0.4.0 (the commit before these tokens existed).
    expect(
      fingerprintOf({
        method: 'POST',
        params: { id: '42' },
        query: { expand: ['a', 'b'] },
        body: { amount: 4200, currency: 'eur', meta: { note: 'é\u2028"', tags: [1, 2.5, -0, null, true] } },
      }),
    ).toBe('VVQuTNlX19hutexvSDdItnab-8FLpeqY5U_etduQGck');
    // Null-prototype objects, as querystring and multer make them.
    expect(
      fingerprintOf({ method: 'POST', params: {}, query: querystring.parse('a=1&b=2&b=3'), body: querystring.parse('x=%20y&z=') }),
    ).toBe('cqGIydC9YH8zc4vvbWcqFpKd-w3iYHoyX9nHtJu72G8');
    // `1e999` as a body parser reads it: Infinity.
    expect(fingerprintOf({ id: 'evt_1', data: { nested: [[], {}, ''] }, huge: JSON.parse('1e999') as number })).toBe(
      'L9VjaUSCza_5u5C_6vV5e5uUiPBr0wgzhOAeouD7i40',
    );
  });
});

describe('trailing undefined arguments', () => {
  it('are dropped from call arguments: f(x, undefined) is the call f(x)', () => {
    expect(withoutTrailingUndefined(['x', undefined, undefined])).toEqual(['x']);
    expect(withoutTrailingUndefined([undefined, 'x'])).toEqual([undefined, 'x']);
    expect(withoutTrailingUndefined([])).toEqual([]);
    expect(fingerprintOf(withoutTrailingUndefined(['x', undefined]))).toBe(fingerprintOf(['x']));
    expect(fingerprintOf(withoutTrailingUndefined(['x', null]))).not.toBe(fingerprintOf(['x']));
  });

  it('makeIdempotent with fingerprint: true replays f(x) to f(x, undefined), and refuses f(x, null)', async () => {
    let runs = 0;
    const charge = makeIdempotent(async (id: string, note?: string | null) => ({ id, note, run: ++runs }), {
      store: new MemoryIdempotencyStore(),
      key: (id: string, _note?: string | null) => id,
      scope: 'charge-trailing',
      fingerprint: true,
    });
    const first = await charge('c1');
    expect(await charge('c1', undefined)).toEqual(first);
    await expect(charge('c1', null)).rejects.toMatchObject({ code: 'IDEMPOTENCY_FINGERPRINT_MISMATCH' });
    expect(runs).toBe(1);
  });

  it('makeIdempotent with fingerprint: true refuses another Map under the same key', async () => {
    let runs = 0;
    const apply = makeIdempotent(
      async (_id: string, lines: Map<string, number>) => ({ total: [...lines.values()].reduce((a, b) => a + b, 0), run: ++runs }),
      {
        store: new MemoryIdempotencyStore(),
        key: (id) => id,
        scope: 'apply-lines',
        fingerprint: true,
      },
    );
    expect(await apply('o1', new Map([['sku', 1]]))).toEqual({ total: 1, run: 1 });
    await expect(apply('o1', new Map([['sku', 100]]))).rejects.toMatchObject({ code: 'IDEMPOTENCY_FINGERPRINT_MISMATCH' });
    expect(await apply('o1', new Map([['sku', 1]]))).toEqual({ total: 1, run: 1 });
  });
});
