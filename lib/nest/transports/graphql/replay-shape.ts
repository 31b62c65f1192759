import { isThenable } from '../../../core/thenable.js';
/**
 * What a GraphQL mutation's value must keep so that its replay resolves as the first
 * answer did. The resolver's value is walked along the schema at capture time (the
 * mutation field's return type, from its resolve info):
 *
 * - the runtime type of every object at an abstract position (union, interface) is
 *   decided once, with the schema's own `resolveType` / `isTypeOf`, and stored by name,
 *   so a replayed plain object no longer needs the class an `instanceof` looked for;
 * - schema fields read through getters (or inherited) are materialised, since a plain
 *   copy has no prototype;
 * - a custom scalar or enum value that is no JSON primitive (a `Date`, a class a scalar
 *   serializes) is stored as the scalar serializes it and given back through the
 *   scalar's `parseValue`, so it serializes again to the same output;
 * - a field whose getter or scalar threw is stored as that error, and thrown again.
 *
 * Only the graphql-js objects the resolve info carries are used (by duck type and
 * `Symbol.toStringTag`): the `graphql` package is never imported.
 */

/** The parts of graphql-js types read here. */
interface GqlType {
  readonly name?: string;
  readonly ofType?: GqlType;
  getFields?(): Record<string, { readonly type: GqlType }>;
  resolveType?: ((...args: unknown[]) => unknown) | null;
  isTypeOf?: ((...args: unknown[]) => unknown) | null;
  serialize?(value: unknown): unknown;
  parseValue?(value: unknown): unknown;
}

export interface GqlSchemaLike {
  getType(name: string): GqlType | undefined | null;
  getTypeMap(): Record<string, GqlType>;
  getPossibleTypes(type: GqlType): readonly GqlType[];
}

/** The resolve info members capture and replay read. */
export interface ShapeInfo {
  readonly returnType?: unknown;
  readonly schema?: unknown;
}

type Path = (string | number)[];
interface StoredError {
  name: string;
  message: string;
  extensions?: unknown;
}
/**
 * Where a stored value differs from what resolution needs, grouped by name (a list of
 * 100 union members names each type once): `t` the runtime type of the objects at these
 * paths, `p` the scalar or enum whose `parseValue` restores these leaves, `e` the error
 * a field threw.
 */
interface Marks {
  t?: Record<string, Path[]>;
  p?: Record<string, Path[]>;
  e?: [Path, StoredError][];
}

/** The key of a stored value with marks (a name no resolver value uses). */
const SHAPED = '__nestjsIdempotencyGraphql';
/** Deeper values are stored as JSON writes them. */
const MAX_DEPTH = 64;
const BUILT_IN_SCALARS = new Set(['String', 'Int', 'Float', 'Boolean', 'ID']);
/** The runtime type of a replayed object, read by the patched `resolveType` / `isTypeOf`. */
const REPLAYED_TYPE: unique symbol = Symbol('nestjs-idempotency:graphql-type');
const PATCHED: unique symbol = Symbol('nestjs-idempotency:graphql-patched');
const patchedSchemas = new WeakSet<object>();

/** Thrown when a value cannot be captured as it will resolve (a nested Promise). */
export class UnshapeableValueError extends Error {}

/**
 * The value to store for a mutation's `value`, or `value` itself when the info has no
 * schema. `context` and `info` are what a schema `resolveType` / `isTypeOf` receives.
 */
export function captureShaped(value: unknown, context: unknown, info: ShapeInfo | undefined): unknown {
  const schema = info?.schema as GqlSchemaLike | undefined;
  if (!info?.returnType || typeof schema?.getPossibleTypes !== 'function') return value;
  const capture = new Capture(schema, context, info);
  const tree = capture.at(info.returnType as GqlType, value);
  return capture.marked ? { [SHAPED]: 1, value: tree, marks: capture.marks } : tree;
}

/** A stored value as the mutation's resolver value of a replay (see `captureShaped`). */
export function restoreShaped(stored: unknown, info: ShapeInfo | undefined): unknown {
  if (typeof stored !== 'object' || stored === null || (stored as Record<string, unknown>)[SHAPED] !== 1) return stored;
  const { value, marks } = stored as { value: unknown; marks: Marks };
  const schema = info?.schema as GqlSchemaLike | undefined;
  if (schema && typeof schema.getTypeMap === 'function') patchSchema(schema);
  let root = value;
  for (const [scalar, paths] of Object.entries(marks.p ?? {})) {
    for (const path of paths) {
      if (path.length === 0) root = parsed(schema, scalar, root);
      else at(root, path, (slot, last) => (slot[last] = parsed(schema, scalar, slot[last])));
    }
  }
  for (const [path, error] of marks.e ?? []) {
    // As a prototype getter: graphql-js reads it, JSON skips it.
    at(root, path, (slot, last) => Object.defineProperty(slot, last, { enumerable: false, configurable: true, get: () => thrown(error) }));
  }
  for (const [typeName, paths] of Object.entries(marks.t ?? {})) {
    for (const path of paths) {
      if (path.length === 0) markType(root, typeName);
      else at(root, path, (slot, last) => markType(slot[last], typeName));
    }
  }
  return root;
}

/** Calls `apply` with the object holding the value at `path` (non-empty) and its last key. */
function at(root: unknown, path: Path, apply: (slot: Record<string | number, unknown>, last: string | number) => void): void {
  const parent = walk(root, path);
  if (typeof parent === 'object' && parent !== null) apply(parent as Record<string | number, unknown>, path[path.length - 1]);
}

function walk(root: unknown, path: Path): unknown {
  let parent = root;
  for (let i = 0; i < path.length - 1 && typeof parent === 'object' && parent !== null; i++) {
    parent = (parent as Record<string | number, unknown>)[path[i]];
  }
  return parent;
}

function parsed(schema: GqlSchemaLike | undefined, typeName: string, stored: unknown): unknown {
  const type = schema?.getType(typeName);
  if (typeof type?.parseValue !== 'function') return stored;
  try {
    return type.parseValue(stored);
  } catch {
    return stored;
  }
}

function markType(target: unknown, typeName: string): void {
  if (typeof target !== 'object' || target === null) return;
  Object.defineProperty(target, REPLAYED_TYPE, { value: typeName, configurable: true });
  // Read by graphql-js's default type resolver and by @nestjs/graphql's generated ones,
  // so their abstract types need no patch; not enumerable, so no field resolver sees it in a spread.
  if (!Object.prototype.hasOwnProperty.call(target, '__typename')) {
    Object.defineProperty(target, '__typename', { value: typeName, configurable: true });
  }
}

function thrown(error: StoredError): never {
  const replayed = new Error(error.message) as Error & { extensions?: unknown };
  Object.defineProperty(replayed, 'name', { value: error.name, configurable: true, writable: true });
  if (error.extensions !== undefined) replayed.extensions = error.extensions;
  throw replayed;
}

/**
 * Lets the schema's own `resolveType` and `isTypeOf` functions recognise a replayed
 * object by the type stored for it; any other value goes to them unchanged. Done once
 * per schema, in place (graphql-js reads these members at each resolution).
 */
function patchSchema(schema: GqlSchemaLike): void {
  if (patchedSchemas.has(schema)) return;
  patchedSchemas.add(schema);
  for (const type of Object.values(schema.getTypeMap())) {
    const resolveType = type.resolveType;
    if (typeof resolveType === 'function' && !(resolveType as unknown as Record<symbol, unknown>)[PATCHED]) {
      type.resolveType = tagged(function (this: unknown, value: unknown, ...rest: unknown[]) {
        const replayed = replayedTypeOf(value);
        return replayed !== undefined ? replayed : resolveType.call(this, value, ...rest);
      });
    }
    const isTypeOf = type.isTypeOf;
    if (typeof isTypeOf === 'function' && !(isTypeOf as unknown as Record<symbol, unknown>)[PATCHED]) {
      const name = type.name;
      type.isTypeOf = tagged(function (this: unknown, value: unknown, ...rest: unknown[]) {
        const replayed = replayedTypeOf(value);
        return replayed !== undefined ? replayed === name : isTypeOf.call(this, value, ...rest);
      });
    }
  }
}

function tagged<F extends (...args: unknown[]) => unknown>(fn: F): F {
  Object.defineProperty(fn, PATCHED, { value: true });
  return fn;
}

function replayedTypeOf(value: unknown): string | undefined {
  return typeof value === 'object' && value !== null ? (value as { [REPLAYED_TYPE]?: string })[REPLAYED_TYPE] : undefined;
}

function kindOf(type: GqlType): string {
  return Object.prototype.toString.call(type).slice(8, -1);
}

class Capture {
  readonly marks: Marks = {};
  marked = false;
  private readonly path: Path = [];
  private readonly open: object[] = [];

  constructor(
    private readonly schema: GqlSchemaLike,
    private readonly context: unknown,
    private readonly info: ShapeInfo,
  ) {}

  at(type: GqlType, value: unknown): unknown {
    if (value === null || value === undefined) return value;
    if (isThenable(value)) {
      throw new UnshapeableValueError(
        `the value holds a Promise at ${this.path.join('.') || 'its root'}; await it in the resolver, or resolve it with @ResolveField()`,
      );
    }
    switch (kindOf(type)) {
      case 'GraphQLNonNull':
        return this.at(type.ofType!, value);
      case 'GraphQLList':
        return this.list(type.ofType!, value);
      case 'GraphQLScalarType':
      case 'GraphQLEnumType':
        return this.leaf(type, value);
      case 'GraphQLObjectType':
        return this.object(type, value, false);
      case 'GraphQLInterfaceType':
      case 'GraphQLUnionType': {
        const runtime = this.runtimeType(type, value);
        return runtime ? this.object(runtime, value, true) : value;
      }
      default:
        return value;
    }
  }

  /** Arrays and re-iterable collections (a Set); a one-shot iterator is left to graphql-js, which consumes it. */
  private list(itemType: GqlType, value: unknown): unknown {
    if (typeof value !== 'object' || value === null || this.path.length >= MAX_DEPTH) return value;
    const iterate = (value as { [Symbol.iterator]?: () => Iterator<unknown> })[Symbol.iterator];
    if (typeof iterate !== 'function' || (!Array.isArray(value) && iterate.call(value) === value)) return value;
    const out: unknown[] = [];
    let i = 0;
    for (const item of value as Iterable<unknown>) {
      this.path.push(i++);
      out.push(this.at(itemType, item));
      this.path.pop();
    }
    return out;
  }

  /** JSON primitives as they are; anything else as the scalar or enum serializes it (restored by `parseValue`). */
  private leaf(type: GqlType, value: unknown): unknown {
    if (typeof value === 'string' || typeof value === 'boolean' || (typeof value === 'number' && Number.isFinite(value))) return value;
    if (typeof type.serialize !== 'function') return value;
    let output: unknown;
    try {
      output = type.serialize(value);
    } catch (error) {
      this.error(error);
      return value;
    }
    if (!BUILT_IN_SCALARS.has(type.name ?? '') && type.name) this.add((this.marks.p ??= {}), type.name);
    return output;
  }

  /** The first answer failed at this object field: its replay throws the same error (a list item stays as it was). */
  private error(error: unknown): void {
    if (typeof this.path[this.path.length - 1] !== 'string') return;
    const e = error as { name?: unknown; message?: unknown; extensions?: unknown } | null;
    const extensions = typeof e?.extensions === 'object' && e.extensions !== null ? { ...e.extensions } : undefined;
    this.marked = true;
    (this.marks.e ??= []).push([
      [...this.path],
      {
        name: typeof e?.name === 'string' ? e.name : 'Error',
        message: typeof e?.message === 'string' ? e.message : String(error),
        extensions,
      },
    ]);
  }

  /** The object type an abstract type resolves `value` to, as graphql-js would decide it; undefined when only an async answer exists. */
  private runtimeType(abstract: GqlType, value: unknown): GqlType | undefined {
    let name: unknown;
    try {
      if (typeof abstract.resolveType === 'function') {
        name = abstract.resolveType(value, this.context, this.info, abstract);
      } else if (typeof (value as { __typename?: unknown }).__typename === 'string') {
        name = (value as { __typename: string }).__typename;
      } else {
        for (const candidate of this.schema.getPossibleTypes(abstract)) {
          if (typeof candidate.isTypeOf === 'function' && candidate.isTypeOf(value, this.context, this.info) === true) {
            name = candidate.name;
            break;
          }
        }
      }
    } catch {
      return undefined; // the first answer failed here too; the replay asks the schema again
    }
    if (typeof name === 'object' && name !== null && typeof (name as GqlType).name === 'string') name = (name as GqlType).name;
    const type = typeof name === 'string' ? this.schema.getType(name) : undefined;
    return type && kindOf(type) === 'GraphQLObjectType' ? type : undefined;
  }

  /**
   * A plain copy: what JSON would write of the object (its own enumerable properties,
   * or its `toJSON()`), which field resolvers of the replay read from their parent,
   * plus every schema field the object has, read as graphql-js reads it (getters too).
   */
  private object(type: GqlType, value: unknown, abstract: boolean): unknown {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) return value;
    if (this.open.includes(value) || this.path.length >= MAX_DEPTH) return value;
    let mark = abstract;
    if (typeof type.isTypeOf === 'function') {
      let matches: unknown;
      try {
        matches = type.isTypeOf(value, this.context, this.info);
      } catch {
        matches = false;
      }
      if (matches === false) return value; // the first answer was an error here; the replay asks isTypeOf again
      mark = true;
    }
    this.open.push(value);
    const source = value as Record<string, unknown>;
    const base = typeof source.toJSON === 'function' ? (source.toJSON as () => unknown)() : source;
    const out: Record<string, unknown> = {};
    if (typeof base === 'object' && base !== null) for (const key of Object.keys(base)) out[key] = (base as Record<string, unknown>)[key];
    const fields = type.getFields?.() ?? {};
    for (const name of Object.keys(fields)) {
      if (!(name in source)) continue;
      this.path.push(name);
      try {
        const field = source[name];
        if (typeof field === 'function') delete out[name];
        else out[name] = this.at(fields[name].type, field);
      } catch (error) {
        if (error instanceof UnshapeableValueError) throw error;
        this.error(error);
      } finally {
        this.path.pop();
      }
    }
    this.open.pop();
    if (mark && type.name) this.add((this.marks.t ??= {}), type.name);
    return out;
  }

  private add(group: Record<string, Path[]>, name: string): void {
    this.marked = true;
    (group[name] ??= []).push([...this.path]);
  }
}
