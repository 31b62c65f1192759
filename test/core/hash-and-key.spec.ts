import { canonicalJson, fingerprintOf, normalizeIdempotencyKey, parseIdempotencyKeyHeader, storageKeyOf } from '../../lib/core/index.js';

describe('canonicalJson', () => {
  it('sorts keys at every depth and keeps array order', () => {
    expect(canonicalJson({ b: 1, a: { d: [3, 1], c: null } })).toBe('{"a":{"c":null,"d":[3,1]},"b":1}');
    expect(fingerprintOf({ x: 1, y: 2 })).toBe(fingerprintOf({ y: 2, x: 1 }));
    expect(fingerprintOf({ x: 1 })).not.toBe(fingerprintOf({ x: 2 }));
  });

  it('encodes buffers, dates, bigints as bare tokens no JSON value produces, and drops undefined members', () => {
    // Until 0.4.0 a Buffer was the string "b64:aGk=" and a Date its ISO string: both
    // collided with the strings a client could send instead (see canonical-json-values).
    expect(canonicalJson({ b: Buffer.from('hi'), d: new Date(0), n: 10n, u: undefined })).toBe(
      '{"b":Uint8Array("aGk="),"d":Date("1970-01-01T00:00:00.000Z"),"n":n10}',
    );
  });

  it('never lets a value JSON cannot hold collide with null, a string or its neighbour', () => {
    const variants: unknown[] = [null, Infinity, -Infinity, NaN, 0, -0, 'Infinity', 'null', '10', 10, 10n, undefined];
    const inArrays = new Set(variants.map((v) => fingerprintOf([v])));
    expect(inArrays.size).toBe(variants.length);
    // `{"amount":1e999}` is parsed as Infinity: it is not the request `{"amount":null}`.
    expect(fingerprintOf(JSON.parse('{"amount":1e999}'))).not.toBe(fingerprintOf({ amount: null }));
    expect(fingerprintOf([undefined])).not.toBe(fingerprintOf([null]));
  });

  it('refuses hostile nesting and cycles with a client error instead of overflowing', () => {
    let deep: unknown = 1;
    for (let i = 0; i < 10_000; i++) deep = [deep];
    expect(() => canonicalJson(deep)).toThrow(expect.objectContaining({ status: 400, code: 'IDEMPOTENCY_REQUEST_INVALID' }));
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    expect(() => canonicalJson(cycle)).toThrow(/circular/);
  });
});

describe('normalizeIdempotencyKey', () => {
  it('takes keys from code, bodies and message ids as they are, quotes included', () => {
    expect(normalizeIdempotencyKey('abc-123')).toBe('abc-123');
    expect(normalizeIdempotencyKey('"abc-123"')).toBe('"abc-123"');
    expect(normalizeIdempotencyKey('"e1')).toBe('"e1');
    expect(normalizeIdempotencyKey('e,1')).toBe('e,1');
    expect(normalizeIdempotencyKey(42)).toBe('42');
  });

  it.each([[''], ['   '], ['x'.repeat(256)], ['a\nb'], ['a\u0000'], ['a\u007f'], [{}], [null]])('rejects %j', (raw) => {
    expect(() => normalizeIdempotencyKey(raw)).toThrow(expect.objectContaining({ code: 'IDEMPOTENCY_KEY_INVALID', status: 400 }));
  });

  it('accepts 255 characters and Unicode', () => {
    expect(normalizeIdempotencyKey('é'.repeat(255))).toHaveLength(255);
  });
});

describe('parseIdempotencyKeyHeader', () => {
  it('reads one bare or structured-field string value: both name the same key', () => {
    expect(parseIdempotencyKeyHeader('abc')).toBe('abc');
    expect(parseIdempotencyKeyHeader('"abc"')).toBe('abc');
    expect(parseIdempotencyKeyHeader('"a,b"')).toBe('a,b');
    expect(parseIdempotencyKeyHeader('"a\\"b"')).toBe('a"b');
  });

  it.each([['a, b'], ['a,b'], ['"a", "b"'], ['"a",b'], [['a', 'b']], ['"q1'], ['ab"c'], ['"q1"x'], ['"unterminated\\"'], ['q1"'], ['"']])(
    'refuses %j with 400',
    (raw) => {
      expect(() => parseIdempotencyKeyHeader(raw)).toThrow(expect.objectContaining({ code: 'IDEMPOTENCY_KEY_INVALID', status: 400 }));
    },
  );
});

describe('storageKeyOf', () => {
  it('hashes scope and key into a store-safe key, disjoint across scopes', () => {
    const k = storageKeyOf('A.b', 'k{tag}*?[x]\r\n');
    expect(k).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(storageKeyOf('A.b', 'k')).not.toBe(storageKeyOf('A.c', 'k'));
    // The separator keeps ("ab", "c") and ("a", "bc") apart.
    expect(storageKeyOf('ab', 'c')).not.toBe(storageKeyOf('a', 'bc'));
  });
});
