import fc from 'fast-check';
import { decodeValue, deserializeOutcome, encodeValue, serializeOutcome, valueOutcome, type StoredOutcome } from '../../lib/core/outcome';
import { replayValue } from '../../lib/core/engine';

/**
 * The faithful value encoding of in-process entry points: what a stored record gives
 * back after the trip through the store's string. (Compared with the value itself, not
 * with `structuredClone`, whose copies belong to another realm than Jest's and turn a
 * Buffer into a Uint8Array.)
 */
function roundTrip(value: unknown): unknown {
  const stored = serializeOutcome(valueOutcome(value, 'faithful'));
  return replayValue(deserializeOutcome(stored));
}

const reasonOf = (value: unknown): string | undefined => {
  const outcome = valueOutcome(value, 'faithful');
  return outcome.kind === 'unstorable' ? outcome.reason : undefined;
};

describe('faithful values (service methods, makeIdempotent, run, idempotent transactions)', () => {
  it('gives back Date, Map, Set, bigint, Buffer as Buffer, typed arrays, undefined, NaN, ±Infinity and -0, at the top', () => {
    const values: unknown[] = [
      new Date(1_764_625_404_123),
      new Map<unknown, unknown>([
        ['a', 1],
        [2, 'b'],
      ]),
      new Set([1, 'one']),
      12345678901234567890n,
      -1n,
      Buffer.from('hello'),
      new Uint8Array([1, 2, 255]),
      new Float64Array([1.5, -0, NaN]),
      new BigInt64Array([1n, -2n]),
      undefined,
      NaN,
      Infinity,
      -Infinity,
      -0,
    ];
    for (const value of values) {
      const back = roundTrip(value);
      expect(back).toStrictEqual(value);
      if (typeof value === 'object' && value !== null) expect(Object.getPrototypeOf(back)).toBe(Object.getPrototypeOf(value));
    }
    expect(Object.is(roundTrip(-0), -0)).toBe(true);
    expect(Buffer.isBuffer(roundTrip(Buffer.from('x')))).toBe(true);
    expect(Buffer.isBuffer(roundTrip(new Uint8Array([1])))).toBe(false);
  });

  it('gives them back nested anywhere: in objects, arrays, Map keys and values, Sets, with undefined members and holes', () => {
    const value = {
      at: new Date(0),
      amount: 10n,
      missing: undefined,
      ratio: NaN,
      list: [1, undefined, -0, Infinity, new Set([new Date(1), 2n])],
      // eslint-disable-next-line no-sparse-arrays -- a hole is a value structuredClone keeps
      sparse: [1, , 3],
      index: new Map<unknown, unknown>([
        [new Date(2), { bytes: Buffer.from('k') }],
        [3n, new Map([['deep', [new Uint16Array([7])]]])],
      ]),
      nothing: null,
      text: 'x',
      nested: { pattern: /a+b/gi, box: new Number(4) },
    };
    const back = roundTrip(value) as typeof value;
    expect(back).toStrictEqual(value);
    expect('missing' in back).toBe(true);
    // Jest's equality never holds for an invalid Date (NaN !== NaN): checked on its own.
    const invalid = roundTrip({ invalid: new Date(NaN) }) as { invalid: Date };
    expect(invalid.invalid).toBeInstanceOf(Date);
    expect(invalid.invalid.getTime()).toBeNaN();
    expect(1 in back.sparse).toBe(false);
    expect(Buffer.isBuffer(([...back.index.values()][0] as { bytes: Buffer }).bytes)).toBe(true);
    expect(back.nested.pattern).toBeInstanceOf(RegExp);
  });

  it('keeps shared and cyclic references as they were', () => {
    const shared = { id: 'a' };
    const cyclic: Record<string, unknown> = { name: 'root' };
    cyclic.self = cyclic;
    const map = new Map<string, unknown>();
    map.set('me', map);
    const back = roundTrip({ left: shared, right: shared, cyclic, map, list: [shared] }) as {
      left: object;
      right: object;
      cyclic: Record<string, unknown>;
      map: Map<string, unknown>;
      list: object[];
    };
    expect(back.left).toEqual({ id: 'a' });
    expect(back.right).toBe(back.left);
    expect(back.list[0]).toBe(back.left);
    expect(back.cyclic.self).toBe(back.cyclic);
    expect(back.map.get('me')).toBe(back.map);
  });

  it('gives errors back with their class (standard ones), name, message, stack, cause and properties', () => {
    const cause = new Error('root cause');
    const error = Object.assign(new RangeError('too big', { cause }), { code: 'E_RANGE', at: new Date(0) });
    const custom = new Error('custom');
    custom.name = 'PaymentError';
    const back = roundTrip({ error, custom }) as { error: RangeError & { code: string; at: Date }; custom: Error };
    expect(back.error).toBeInstanceOf(RangeError);
    expect(back.error.message).toBe('too big');
    expect(back.error.stack).toBe(error.stack);
    expect(back.error.code).toBe('E_RANGE');
    expect(back.error.at).toEqual(new Date(0));
    expect((back.error.cause as Error).message).toBe('root cause');
    expect(back.custom.name).toBe('PaymentError');
  });

  it('escapes data that looks like a tag, and a member named __proto__ stays a member', () => {
    const value = JSON.parse('{"$":"D","v":0,"inner":{"$":"r","v":0},"__proto__":{"polluted":true}}') as Record<string, unknown>;
    const back = roundTrip(value) as Record<string, unknown>;
    expect(back).toStrictEqual(value);
    expect(Object.getPrototypeOf(back)).toBe(Object.prototype);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });

  it('gives a class instance back as a plain object of its own enumerable fields, and an object with toJSON as what that returns', () => {
    class Refund {
      constructor(
        readonly id: string,
        readonly at: Date,
      ) {}
      get label(): string {
        return `refund ${this.id}`;
      }
    }
    class Money {
      constructor(private readonly cents: number) {}
      toJSON(): string {
        return (this.cents / 100).toFixed(2);
      }
    }
    const back = roundTrip({ refund: new Refund('r1', new Date(0)), price: new Money(1250) }) as Record<string, unknown>;
    expect(back).toStrictEqual({ refund: { id: 'r1', at: new Date(0) }, price: '12.50' });
    expect(Object.getPrototypeOf(back.refund)).toBe(Object.prototype);
  });

  it('refuses on the first call, naming what and where, what a replay could not return', () => {
    class Secretive {
      #balance = 10;
      get balance(): number {
        return this.#balance;
      }
    }
    const cases: [unknown, RegExp][] = [
      [() => 1, /a function/],
      [{ handler: { run: () => 1 } }, /a function at \.handler\.run/],
      [[1, Symbol('s')], /a symbol at \[1\]/],
      [{ later: Promise.resolve(1) }, /a Promise at \.later/],
      [{ weak: new WeakMap() }, /a WeakMap at \.weak/],
      [{ weak: new WeakSet() }, /a WeakSet at \.weak/],
      [new Map([['k', () => 1]]), /a function at <Map entry 0>/],
      [{ account: new Secretive() }, /instance of Secretive without own enumerable fields.*at \.account/],
      [{ query: new URLSearchParams('a=1') }, /instance of URLSearchParams/],
    ];
    for (const [value, reason] of cases) expect(reasonOf(value)).toMatch(reason);
    // A top-level stream or Promise keeps the message every entry point gives.
    expect(reasonOf(Promise.resolve(1))).toBe('the response is a Promise');
  });

  it('stores a JSON-clean value exactly as before (tag j, same JSON), so nothing changes for it', () => {
    const values: unknown[] = ['text', 1, true, null, { a: [1, { b: 'c' }], n: null }, [], {}];
    for (const value of values) {
      expect(serializeOutcome(valueOutcome(value, 'faithful'))).toBe(serializeOutcome({ kind: 'value', value: encodeValue(value) }));
    }
    const clean = { id: 1, items: [{ sku: 'a' }] };
    const encoded = encodeValue(clean, 'faithful');
    // Not even copied.
    expect(encoded).toEqual({ t: 'j', v: clean });
    expect((encoded as { v: unknown }).v).toBe(clean);
  });

  it('round-trips arbitrary JSON data and arbitrary structured data', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(roundTrip(value)).toStrictEqual(value);
      }),
      { numRuns: 300 },
    );
    const leaf = fc.oneof(
      fc.date({ noInvalidDate: true }),
      fc.bigInt(),
      fc.double(),
      fc.constant(undefined),
      fc.string(),
      fc.uint8Array().map((bytes) => Buffer.from(bytes)),
      fc.int32Array(),
    );
    const tree = fc.letrec((tie) => ({
      node: fc.oneof(
        { depthSize: 'small' },
        leaf,
        fc.array(tie('node')),
        fc.dictionary(fc.string(), tie('node'), { noNullPrototype: true }),
        fc.array(fc.tuple(leaf, tie('node'))).map((entries) => new Map(entries)),
        fc.array(leaf).map((members) => new Set(members)),
      ),
    })).node;
    fc.assert(
      fc.property(tree, (value) => {
        expect(roundTrip(value)).toStrictEqual(value);
      }),
      { numRuns: 300 },
    );
  });

  it('still decodes records written before the faithful encoding (tags u, j, b)', () => {
    const old: [string, unknown][] = [
      ['{"kind":"value","value":{"t":"u"}}', undefined],
      ['{"kind":"value","value":{"t":"j","v":{"at":"1970-01-01T00:00:00.000Z"}}}', { at: '1970-01-01T00:00:00.000Z' }],
      ['{"kind":"value","value":{"t":"b","v":"aGk="}}', Buffer.from('hi')],
    ];
    for (const [record, value] of old) {
      const outcome = deserializeOutcome(record) as Extract<StoredOutcome, { kind: 'value' }>;
      expect(decodeValue(outcome.value)).toStrictEqual(value);
    }
  });

  it("leaves the 'json' encoding of wire transports as it was: a Date is stored as its JSON string", () => {
    const stored = serializeOutcome(valueOutcome({ at: new Date(0) }, 'json'));
    expect(stored).toBe('{"kind":"value","value":{"t":"j","v":{"at":"1970-01-01T00:00:00.000Z"}}}');
  });
});
