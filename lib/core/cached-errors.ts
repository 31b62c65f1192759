/** An error class, as `cacheErrors` may list it (its constructor is never called by the library). */
export type ErrorClass = abstract new (...args: never[]) => Error;

/**
 * Which thrown errors are stored and replayed like a result, instead of releasing the
 * key: a predicate, or the classes whose instances are. Listed classes also come back as
 * themselves on a replay in any process (`instanceof` holds, with the stored name,
 * message and fields); an error selected by a predicate comes back as the nearest
 * built-in class of its chain (`RangeError`, `TypeError`, ..., else `Error`) carrying the
 * original name, message and fields, since only its name was stored.
 */
export type CacheErrors = ((error: unknown) => boolean) | readonly ErrorClass[];

/** The predicate that `cacheErrors` stands for; `undefined` when nothing is cached. */
export function cachedErrorSelector(option: CacheErrors | undefined): ((error: unknown) => boolean) | undefined {
  if (option === undefined) return undefined;
  if (typeof option === 'function') return option;
  const classes = option;
  return (error) => classes.some((type) => error instanceof type);
}

/** The classes a replayed error is rebuilt as: those `cacheErrors` lists. */
export function cachedErrorClasses(option: CacheErrors | undefined): readonly ErrorClass[] | undefined {
  return Array.isArray(option) ? option : undefined;
}

/** True for a value `cacheErrors` accepts: a function, or an array of classes. */
export function isCacheErrorsOption(value: unknown): value is CacheErrors {
  return typeof value === 'function' || (Array.isArray(value) && value.every((item) => typeof item === 'function'));
}

const BUILT_IN: Record<string, ErrorClass> = {
  Error,
  TypeError,
  RangeError,
  SyntaxError,
  ReferenceError,
  EvalError,
  URIError,
  AggregateError,
};

/** The constructor names of an error's prototype chain, nearest first (`['DeclinedError', 'RangeError', 'Error']`). */
export function errorChainOf(error: Error): string[] {
  const chain: string[] = [];
  for (let prototype = Object.getPrototypeOf(error) as object | null; prototype && prototype !== Object.prototype;) {
    const name = (prototype as { constructor?: { name?: unknown } }).constructor?.name;
    if (typeof name === 'string' && name && !chain.includes(name)) chain.push(name);
    prototype = Object.getPrototypeOf(prototype) as object | null;
  }
  return chain;
}

/** The prototype a stored error is rebuilt on: the first class of its chain that is listed, else built in. */
export function errorPrototypeFor(chain: readonly string[], classes: readonly ErrorClass[] | undefined): object {
  for (const name of chain) {
    const listed = classes?.find((type) => type.name === name);
    if (listed) return listed.prototype as object;
    if (Object.prototype.hasOwnProperty.call(BUILT_IN, name)) return BUILT_IN[name].prototype as object;
  }
  return Error.prototype;
}
