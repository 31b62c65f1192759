/**
 * Which class instances keep per-instance state that the fingerprint cannot read: a
 * `#private` field (native, or as TypeScript, Babel, SWC and esbuild write it for
 * targets below ES2022: one WeakMap entry per instance), or state a class keeps in a
 * WeakMap of its own (`state.set(this, ...)`). Such an instance fingerprinted as its
 * public fields would collapse `new Money(500)` and `new Money(50000)` into one input.
 *
 * What counts is per-instance *state*: private methods and accessors (`#format()`,
 * `get #total()`) hold none, and static private fields are the same for every instance
 * of the class, so neither can tell two instances apart.
 *
 * Read from the source of each class up the prototype chain (Function.prototype.toString),
 * once per prototype. Native constructors (`[native code]`: built-ins, bound functions,
 * callable proxies) show no source and count as having none: the encoder handles the
 * built-ins by their internal slots, and an instance of anything else without own
 * enumerable fields is refused as before. Minified down-levelled code (helpers renamed)
 * cannot be recognised: such classes need a toJSON().
 */

/** Prototypes the encoder writes by their own rule, implemented in JavaScript by Node (their `#` fields are not the caller's). */
const ENCODED_BUILT_INS: ReadonlySet<object> = new Set<object>([
  Object.prototype,
  Array.prototype,
  URLSearchParams.prototype,
  URL.prototype,
  Buffer.prototype,
]);

/**
 * Per-instance private state as down-levelling compilers and hand-written code keep it:
 * `_Money_cents.set(this, ...)` (TypeScript below ES2022, Babel before 7.14, a WeakMap of
 * one's own), `_classPrivateFieldInitSpec(this, ...)` (Babel), `_class_private_field_init(this, ...)`
 * (SWC), `Object.defineProperty(this, _cents, { writable: ... })` (Babel and SWC loose mode),
 * `__privateAdd(this, _cents)` (esbuild; its brand for private methods is `_<Class>_instances`).
 * Private methods are written as `.add(this)` to a WeakSet, `_classPrivateMethodInitSpec`,
 * `_class_private_method_init`: not state, not matched.
 */
const DOWNLEVELLED_FIELD =
  /\.set\(\s*this\s*,|classPrivateFieldInit|class_private_field_init|defineProperty\(\s*this\s*,\s*[\w$]+\s*,\s*\{\s*writable\s*:|__privateAdd\(\s*this\s*,(?!\s*[\w$]+_instances\d*\s*\))/;

/** Keywords after which a `/` starts a regular expression, not a division. */
const BEFORE_REGEXP = new Set([
  'return',
  'typeof',
  'instanceof',
  'in',
  'of',
  'new',
  'delete',
  'void',
  'throw',
  'case',
  'do',
  'else',
  'yield',
  'await',
  'extends',
]);

/** The class up a prototype chain that keeps per-instance private state: its name and its prototype. */
export interface PrivateStateHolder {
  readonly name: string;
  readonly prototype: object;
}

/** Verdict per prototype for its whole chain: the nearest class that keeps private state, or null. */
const chainVerdicts = new WeakMap<object, PrivateStateHolder | null>();
/** Verdict per constructor, from its own source only. */
const ownVerdicts = new WeakMap<Function, boolean>();

/**
 * The nearest class, up `obj`'s prototype chain, that declares per-instance private
 * state, or `undefined` when none does. One WeakMap lookup once a prototype was seen.
 */
export function classWithPrivateState(obj: object): PrivateStateHolder | undefined {
  const proto = Object.getPrototypeOf(obj) as object | null;
  if (proto === null) return undefined;
  let verdict = chainVerdicts.get(proto);
  if (verdict === undefined) {
    verdict = chainVerdictOf(proto);
    chainVerdicts.set(proto, verdict);
  }
  return verdict ?? undefined;
}

/**
 * The `toJSON` that speaks for all of an instance's private state: one defined on the
 * instance, its class, or a class between them and the nearest class that keeps private
 * state. One inherited from above it (a base class's generic `toJSON()`, `Date`'s) was not
 * written knowing that state.
 */
export function ownToJSON(obj: object, holder: PrivateStateHolder): (() => unknown) | undefined {
  for (let current: object | null = obj; current !== null; current = Object.getPrototypeOf(current) as object | null) {
    const toJSON = Object.getOwnPropertyDescriptor(current, 'toJSON')?.value as unknown;
    if (typeof toJSON === 'function') return toJSON as () => unknown;
    if (current === holder.prototype) return undefined;
  }
  return undefined;
}

function chainVerdictOf(start: object): PrivateStateHolder | null {
  for (let proto: object | null = start; proto !== null; proto = Object.getPrototypeOf(proto) as object | null) {
    // The chain's end: Object.prototype of this realm or another (also the null-prototype objects).
    if (ENCODED_BUILT_INS.has(proto) || Object.getPrototypeOf(proto) === null) return null;
    const constructor = Object.getOwnPropertyDescriptor(proto, 'constructor')?.value as unknown;
    if (typeof constructor !== 'function') continue;
    let own = ownVerdicts.get(constructor);
    if (own === undefined) {
      own = declaresPrivateState(sourceOf(constructor));
      ownVerdicts.set(constructor, own);
    }
    if (own) return { name: (constructor as { name?: string }).name || 'an anonymous class', prototype: proto };
  }
  return null;
}

function sourceOf(fn: Function): string {
  try {
    return Function.prototype.toString.call(fn);
  } catch {
    return '';
  }
}

/** Whether a class's source declares per-instance private state (see the module's comment). */
export function declaresPrivateState(source: string): boolean {
  if (DOWNLEVELLED_FIELD.test(source)) return true;
  return source.includes('#') && declaresPrivateField(source);
}

const isIdStart = (code: number): boolean =>
  (code >= 97 && code <= 122) || (code >= 65 && code <= 90) || code === 36 || code === 95 || code === 92 || code >= 128;
const isIdPart = (code: number): boolean => isIdStart(code) || (code >= 48 && code <= 57);
const isSpace = (code: number): boolean =>
  code === 32 ||
  code === 9 ||
  code === 10 ||
  code === 13 ||
  code === 11 ||
  code === 12 ||
  code === 0xa0 ||
  code === 0xfeff ||
  code === 0x2028 ||
  code === 0x2029;

/**
 * A scan of the source for a native private instance field: `#name` outside strings,
 * template text, comments and regular expressions, that is not a use (`this.#name`,
 * `#name in obj`), a method or accessor (`#name(`), or static (`static #name`).
 * Field declarations need no semicolon, so they are found by what they are not.
 */
function declaresPrivateField(s: string): boolean {
  const n = s.length;
  /** The last significant token: an identifier or keyword, 'value' (number, string, regexp) or a punctuator. */
  let prev = '';
  let depth = 0;
  /** Brace depths at which a template's `${` opened. */
  const templates: number[] = [];
  let i = 0;
  const skipTemplate = (): void => {
    // From inside template text to its end, or into a `${` substitution.
    while (i < n) {
      const c = s[i];
      if (c === '\\') i += 2;
      else if (c === '`') {
        i++;
        prev = 'value';
        return;
      } else if (c === '$' && s[i + 1] === '{') {
        i += 2;
        templates.push(depth);
        depth++;
        prev = '{';
        return;
      } else i++;
    }
  };
  while (i < n) {
    const c = s[i];
    const code = s.charCodeAt(i);
    if (isSpace(code)) {
      i++;
    } else if (c === '/' && s[i + 1] === '/') {
      while (i < n && s[i] !== '\n' && s[i] !== '\r') i++;
    } else if (c === '/' && s[i + 1] === '*') {
      const end = s.indexOf('*/', i + 2);
      i = end < 0 ? n : end + 2;
    } else if (c === '"' || c === "'") {
      i++;
      while (i < n && s[i] !== c && s[i] !== '\n') i += s[i] === '\\' ? 2 : 1;
      i++;
      prev = 'value';
    } else if (c === '`') {
      i++;
      skipTemplate();
    } else if (c === '{') {
      depth++;
      i++;
      prev = '{';
    } else if (c === '}') {
      i++;
      depth--;
      if (templates.length > 0 && templates[templates.length - 1] === depth) {
        templates.pop();
        skipTemplate();
      } else prev = '}';
    } else if (c === '/') {
      const division =
        prev === 'value' || prev === ')' || prev === ']' || prev === '}' || (isIdStart(prev.charCodeAt(0)) && !BEFORE_REGEXP.has(prev));
      const end = division ? -1 : endOfRegExp(s, i);
      if (end < 0) {
        i++;
        prev = '/';
      } else {
        i = end;
        while (i < n && isIdPart(s.charCodeAt(i))) i++;
        prev = 'value';
      }
    } else if (c === '#' && i + 1 < n && isIdStart(s.charCodeAt(i + 1))) {
      let j = i + 1;
      while (j < n && isIdPart(s.charCodeAt(j))) j++;
      let next = j;
      while (next < n && isSpace(s.charCodeAt(next))) next++;
      const use = prev === '.' || (s.startsWith('in', next) && !isIdPart(s.charCodeAt(next + 2)));
      if (!use && prev !== 'static' && s[next] !== '(') return true;
      i = j;
      prev = 'value';
    } else if (isIdStart(code)) {
      let j = i + 1;
      while (j < n && isIdPart(s.charCodeAt(j))) j++;
      prev = s.slice(i, j);
      i = j;
    } else if (code >= 48 && code <= 57) {
      while (i < n && (isIdPart(s.charCodeAt(i)) || s[i] === '.')) i++;
      prev = 'value';
    } else {
      i++;
      prev = c;
    }
  }
  return false;
}

/** The index after a regular expression literal starting at `start`, or -1 when the line ends first (it was a division). */
function endOfRegExp(s: string, start: number): number {
  let inClass = false;
  for (let i = start + 1; i < s.length; i++) {
    const c = s[i];
    if (c === '\n' || c === '\r') return -1;
    if (c === '\\') i++;
    else if (c === '[') inClass = true;
    else if (c === ']') inClass = false;
    else if (c === '/' && !inClass) return i + 1;
  }
  return -1;
}
