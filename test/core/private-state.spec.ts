import * as vm from 'node:vm';
import { transformSync as swcTransform } from '@swc/core';
import fc from 'fast-check';
import ts from 'typescript';
import { canonicalJson, fingerprintOf } from '../../lib/core/hash';
import { IdempotencyConfigurationError } from '../../lib/core/errors';
import { classWithPrivateState, declaresPrivateState } from '../../lib/core/private-state';

/**
 * Issue 41, item 7: an argument whose state is in `#private` fields fingerprinted as its
 * public fields, so `new Money(500)` and `new Money(50000)` (public `currency`, amount in
 * `#cents`) were one input. An instance whose class keeps per-instance private state is
 * now written as its toJSON() or refused; every other value is written as before.
 */

class Money {
  readonly currency = 'EUR';
  readonly #cents: number;
  constructor(cents: number) {
    this.#cents = cents;
  }
  get cents(): number {
    return this.#cents;
  }
}

class JsonMoney {
  readonly currency = 'EUR';
  readonly #cents: number;
  constructor(cents: number) {
    this.#cents = cents;
  }
  toJSON() {
    return { currency: this.currency, cents: this.#cents };
  }
}

/** Only private methods, accessors and static state: nothing per instance that the public fields do not show. */
class Formatted {
  static #made = 0;
  constructor(readonly cents: number) {
    Formatted.#made++;
  }
  #format(): string {
    return `${this.#euros}`;
  }
  get #euros(): number {
    return this.cents / 100;
  }
  static get made(): number {
    return Formatted.#made;
  }
  show(): string {
    return this.#format();
  }
}

const refusal = (value: unknown): IdempotencyConfigurationError => {
  try {
    canonicalJson(value);
  } catch (error) {
    return error as IdempotencyConfigurationError;
  }
  throw new Error(`${canonicalJson(value)} was not refused`);
};

/** Evaluates compiled JavaScript and returns what its last statement names. */
function load<T>(code: string, names: string): T {
  return vm.runInThisContext(`(() => { ${code}\nreturn ${names}; })()`) as T;
}

const SOURCE = `
class Money { currency = 'EUR'; #cents: number; constructor(c: number) { this.#cents = c; } get cents() { return this.#cents; } }
class Formatted { #format() { return String(this.cents); } constructor(public cents: number) {} show() { return this.#format(); } }
class Counted { static #made = 0; constructor(public id: string) { Counted.#made++; } }
class Sub extends Money { note = 'n'; }`;

type Compiled = {
  Money: new (c: number) => object;
  Formatted: new (c: number) => object;
  Counted: new (id: string) => object;
  Sub: new (c: number) => object;
};

const COMPILERS: Record<string, () => string> = {
  'TypeScript, target ES2021': () => ts.transpileModule(SOURCE, { compilerOptions: { target: ts.ScriptTarget.ES2021 } }).outputText,
  'TypeScript, target ES2015': () => ts.transpileModule(SOURCE, { compilerOptions: { target: ts.ScriptTarget.ES2015 } }).outputText,
  'SWC, target es2021': () => swcTransform(SOURCE, { jsc: { parser: { syntax: 'typescript' }, target: 'es2021' } }).code,
  'SWC, target es2021, loose': () =>
    swcTransform(SOURCE, { jsc: { parser: { syntax: 'typescript' }, target: 'es2021', loose: true } }).code,
};

describe('an argument whose class keeps #private state (issue 41, item 7)', () => {
  it('refuses Money with a public currency and its amount in #cents, instead of fingerprinting it as {"currency":"EUR"}', () => {
    const error = refusal(new Money(500));
    expect(error).toBeInstanceOf(IdempotencyConfigurationError);
    expect(error.code).toBe('IDEMPOTENCY_CONFIGURATION_ERROR');
    expect(error.message).toMatch(/instance of Money: Money keeps state in #private fields/);
    expect(error.hint).toMatch(/toJSON\(\).*plain data.*fingerprint option/);
    // Anywhere in the material: an argument list, a member, a Map value.
    expect(() => fingerprintOf(['rf_1', new Money(500)])).toThrow(IdempotencyConfigurationError);
    expect(() => fingerprintOf({ refund: { amount: new Money(500) } })).toThrow(IdempotencyConfigurationError);
    expect(() => fingerprintOf(new Map([['amount', new Money(500)]]))).toThrow(IdempotencyConfigurationError);
  });

  it('writes such an instance as its toJSON(), so two amounts are two inputs', () => {
    expect(canonicalJson(new JsonMoney(500))).toBe('{"cents":500,"currency":"EUR"}');
    expect(fingerprintOf(['rf_1', new JsonMoney(500)])).not.toBe(fingerprintOf(['rf_1', new JsonMoney(50000)]));
    expect(fingerprintOf(['rf_1', new JsonMoney(500)])).toBe(fingerprintOf(['rf_1', new JsonMoney(500)]));
  });

  it('does not take valueOf() for the state: a conversion for arithmetic says nothing of the rest', () => {
    class Priced {
      readonly #cents: number;
      readonly #currency: string;
      constructor(cents: number, currency: string) {
        this.#cents = cents;
        this.#currency = currency;
      }
      valueOf(): number {
        return this.#cents;
      }
      get currency(): string {
        return this.#currency;
      }
    }
    // 500 EUR and 500 USD have one valueOf(): taking it would collapse them.
    expect(refusal(new Priced(500, 'EUR'))).toBeInstanceOf(IdempotencyConfigurationError);
  });

  it('refuses a subclass of such a class, and names the class that keeps the state', () => {
    class Refund extends Money {
      readonly reason = 'duplicate';
    }
    class Partial extends Refund {}
    expect(refusal(new Refund(500)).message).toMatch(/instance of Refund: it extends Money, which keeps state/);
    expect(refusal(new Partial(500)).message).toMatch(/instance of Partial: it extends Money/);
    class JsonRefund extends Money {
      toJSON() {
        return { cents: this.cents, currency: this.currency };
      }
    }
    expect(canonicalJson(new JsonRefund(7))).toBe('{"cents":7,"currency":"EUR"}');
  });

  it('takes only a toJSON() written at or below the class that keeps the state, not one inherited from above it', () => {
    class Entity {
      toJSON() {
        return { ...this };
      }
    }
    class Account extends Entity {
      readonly #balance: number;
      constructor(balance: number) {
        super();
        this.#balance = balance;
      }
      get balance(): number {
        return this.#balance;
      }
    }
    // Entity's toJSON() sees no #balance: taking it would collapse every Account into {}.
    expect(refusal(new Account(1)).message).toMatch(/instance of Account: Account keeps state/);
    class Tagged extends JsonMoney {
      readonly #tag: string;
      constructor(cents: number, tag: string) {
        super(cents);
        this.#tag = tag;
      }
      get tag(): string {
        return this.#tag;
      }
    }
    expect(refusal(new Tagged(1, 'a'))).toBeInstanceOf(IdempotencyConfigurationError);
    const own = Object.assign(new Account(2), { toJSON: () => ({ balance: 2 }) });
    expect(canonicalJson(own)).toBe('{"balance":2}');
  });

  it('refuses a Map, Array, Error or Date subclass with private state too (its entries are not all it holds)', () => {
    class PriceList extends Map<string, number> {
      readonly #currency: string;
      constructor(currency: string) {
        super([['sku', 1]]);
        this.#currency = currency;
      }
      get currency(): string {
        return this.#currency;
      }
    }
    class Lines extends Array<number> {
      #owner = 'acme';
      get owner(): string {
        return this.#owner;
      }
    }
    class Declined extends Error {
      #card = '4242';
      get card(): string {
        return this.#card;
      }
    }
    class Stamp extends Date {
      #zone = 'Europe/Paris';
      get zone(): string {
        return this.#zone;
      }
    }
    for (const value of [new PriceList('EUR'), Lines.from([1]), new Declined('no'), new Stamp(0)]) {
      expect(refusal(value)).toBeInstanceOf(IdempotencyConfigurationError);
    }
    // The built-ins themselves, and their subclasses without private state, as before.
    class Tags extends Array<string> {}
    expect(canonicalJson(Tags.from(['a']))).toBe('["a"]');
    expect(canonicalJson(new URLSearchParams('a=1'))).toBe('URLSearchParams("a=1")');
    expect(canonicalJson(new URL('https://example.com/a?b=1'))).toBe('"https://example.com/a?b=1"');
    expect(canonicalJson(Buffer.from('hi'))).toBe('Uint8Array("aGk=")');
  });

  it('keeps instances with private methods, accessors or static private fields only as their public fields, as in 0.6.x', () => {
    const value = new Formatted(500);
    expect(value.show()).toBe('5');
    expect(Formatted.made).toBeGreaterThan(0);
    expect(canonicalJson(value)).toBe('{"cents":500}');
    expect(fingerprintOf(['rf_1', value])).toBe(fingerprintOf(['rf_1', { cents: 500 }]));
    expect(canonicalJson(new Formatted(50000))).not.toBe(canonicalJson(value));
  });

  it('refuses state kept in a WeakMap of the class (the pattern before #private fields)', () => {
    const cents = new WeakMap<object, number>();
    class Legacy {
      readonly currency = 'EUR';
      constructor(amount: number) {
        cents.set(this, amount);
      }
    }
    expect(refusal(new Legacy(500))).toBeInstanceOf(IdempotencyConfigurationError);
  });

  describe.each(Object.keys(COMPILERS))('compiled by %s (private fields as WeakMaps)', (compiler) => {
    const {
      Money: Compiled,
      Formatted: CompiledFormatted,
      Counted,
      Sub,
    } = load<Compiled>(COMPILERS[compiler](), '{ Money, Formatted, Counted, Sub }');

    it('refuses an instance with a private field, and its subclass', () => {
      expect(refusal(new Compiled(500))).toBeInstanceOf(IdempotencyConfigurationError);
      expect(refusal(new Sub(500))).toBeInstanceOf(IdempotencyConfigurationError);
    });

    it('keeps private methods and static private fields out of it', () => {
      expect(canonicalJson(new CompiledFormatted(500))).toBe('{"cents":500}');
      expect(canonicalJson(new Counted('a'))).toBe('{"id":"a"}');
    });
  });

  it('recognises the helpers of esbuild (not a dependency here: its output for target es2020, as 0.25 writes it)', () => {
    const field =
      'class Money {\n  constructor(c) {\n    __publicField(this, "currency", "EUR");\n    __privateAdd(this, _cents);\n    __privateSet(this, _cents, c);\n  }\n}';
    const method =
      'class Formatted {\n  constructor(cents) {\n    __privateAdd(this, _Formatted_instances);\n    this.cents = cents;\n  }\n  show() {\n    return __privateMethod(this, _Formatted_instances, format_fn).call(this);\n  }\n}';
    const both = 'class Acc {\n  constructor() {\n    __privateAdd(this, _Acc_instances);\n    __privateAdd(this, _a, 1);\n  }\n}';
    const staticOnly = 'class _Counted {\n  constructor(id) {\n    this.id = id;\n    __privateWrapper(_Counted, _count)._++;\n  }\n}';
    expect([field, method, both, staticOnly].map(declaresPrivateState)).toEqual([true, false, true, false]);
  });

  it('recognises the helpers of Babel (spec and loose) and hand-written WeakMap state', () => {
    expect(declaresPrivateState('class M { constructor() { _classPrivateFieldInitSpec(this, _cents, void 0); } }')).toBe(true);
    expect(
      declaresPrivateState('class M { constructor() { _classPrivateFieldInitSpec(this, _cents, { writable: true, value: 1 }); } }'),
    ).toBe(true);
    expect(
      declaresPrivateState('class M { constructor() { Object.defineProperty(this, _cents, { writable: true, value: void 0 }); } }'),
    ).toBe(true);
    expect(declaresPrivateState('class M { constructor() { _cents.set(this, { writable: true, value: void 0 }); } }')).toBe(true);
    expect(declaresPrivateState('class M { constructor() { _classPrivateMethodInitSpec(this, _M_brand); } }')).toBe(false);
    expect(declaresPrivateState('class M { constructor() { Object.defineProperty(this, _format, { value: _format2 }); } }')).toBe(false);
    expect(declaresPrivateState('class M { constructor() { _format.add(this); } }')).toBe(false);
    expect(declaresPrivateState('class M { constructor() { __privateAdd(this, _M_instances); } }')).toBe(false);
    expect(declaresPrivateState('class M { constructor() { __privateAdd(this, _instances); } }')).toBe(true);
  });

  it('finds a declaration wherever the class writes it, and no # in strings, comments, templates or regular expressions', () => {
    const declares = [
      'class A { #x }',
      'class A { #x = 1; }',
      'class A { a = 1\n  #b = 2\n}',
      'class A{a=b/2;#x=c/3}',
      'class A { m() { return this.a / 2 / 3 } #x = 1 }',
      'class A { accessor #x = 1 }',
      'class A { m() { return `${{ a: 1 }}` } #x; }',
      'class A { m() { if (x) /re/.test(y) } #x; }',
      'class A { #\\u0078 = 1 }',
    ];
    for (const source of declares) expect([source, declaresPrivateState(source)]).toEqual([source, true]);
    const none = [
      'class A { x = "#y"; y = \'#z\' }',
      'class A { /* #z */ // #w\n }',
      'class A { re = /#q/; }',
      'class A { t = `#a ${ { b: "#c" } } #d ${`${"#e"}`}`; }',
      'class A { static #x = 1; static #y; static #m() {} }',
      'class A { #m() {} get #g() { return 1 } set #g(v) {} async #a() {} *#b() {} async *#c() {} }',
      'class A { has(o) { return #m in o } #m() {} uses() { return this.#m() + this?.#m() } }',
      'class A { m() { return 1 / 2 } }',
      'class A { m() { return x.replace(/[#/]/g, "") } }',
      'class A {}',
      'function Native() { [native code] }',
    ];
    for (const source of none) expect([source, declaresPrivateState(source)]).toEqual([source, false]);
  });

  it('counts a class whose source the runtime does not show (native, bound) as having none: its fields, else the old refusal', () => {
    class Plain {
      constructor(readonly id: string) {}
    }
    const Bound = Plain.bind(null, 'b');
    expect(canonicalJson(new Bound())).toBe('{"id":"b"}');
    const hidden = Object.create({ constructor: Math.max }) as { id?: string };
    hidden.id = 'h';
    expect(canonicalJson(hidden)).toBe('{"id":"h"}');
    expect(() => canonicalJson(new WeakMap())).toThrow(/instance of WeakMap: it has no own enumerable fields/);
  });

  it('sees through a Proxy to the class of its target', () => {
    expect(refusal(new Proxy(new Money(500), {}))).toBeInstanceOf(IdempotencyConfigurationError);
    expect(canonicalJson(new Proxy(new Formatted(5), {}))).toBe('{"cents":5}');
    expect(canonicalJson(new Proxy({ a: 1 }, {}))).toBe('{"a":1}');
  });

  it('decides once per prototype', () => {
    const toString = jest.spyOn(Function.prototype, 'toString');
    try {
      class Fresh {
        #id = 1;
        get id(): number {
          return this.#id;
        }
      }
      expect(classWithPrivateState(new Fresh())?.name).toBe('Fresh');
      const calls = toString.mock.calls.length;
      for (let i = 0; i < 10; i++) expect(classWithPrivateState(new Fresh())?.name).toBe('Fresh');
      expect(toString.mock.calls.length).toBe(calls);
    } finally {
      toString.mockRestore();
    }
  });

  it('writes class instances without private state exactly as the plain objects of their fields (0.6.x fingerprints)', () => {
    class Record {}
    fc.assert(
      fc.property(
        fc.dictionary(
          fc.string().filter((key) => key !== '__proto__'),
          fc.jsonValue(),
          { minKeys: 1 },
        ),
        (fields) => {
          expect(canonicalJson(Object.assign(new Record(), fields))).toBe(canonicalJson(fields));
        },
      ),
      { numRuns: 300 },
    );
    class Visible {
      constructor(readonly cents: number) {}
    }
    // Computed before this change (0.6.x).
    expect(fingerprintOf(['rf_1', new Visible(500)])).toBe(fingerprintOf(['rf_1', { cents: 500 }]));
  });
});
