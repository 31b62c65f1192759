import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import * as ts from 'typescript';
import { IdempotencyInterceptor, IdempotencyRuntime, type IdempotencyService, type TransportAdapter } from '../../lib/index.js';
import type { MethodAdapter } from '../../lib/nest/transports/method/method.adapter.js';
import { TRANSPORTS } from '../../lib/nest/transports/registry.js';
import { CONFORMANCE_DRIVERS, REQUIRED_DRIVERS, type EntryId } from './drivers.js';

/**
 * Adding an entry point without passing the conformance suite must be impossible: this
 * reads the entry points from the library's code, not from a list kept here, and fails
 * when one has no driver in drivers.ts (or a driver has no suite).
 */
const ROOT = join(__dirname, '..', '..');
const LIB = join(ROOT, 'lib');

/**
 * Functions that turn a client key into a storage key but are no entry point (they never
 * run a handler or replay an answer): each with the reason.
 */
const NOT_ENTRY_POINTS: Record<string, string> = {
  'IdempotencyService.locate': 'support tooling: inspect() and forget() find an existing record',
  'OneTimeTokenService.keyOf': 'one-time tokens are consumed, never replayed (lib/tokens)',
};

/** The keys of IdempotencyRuntime's protected `adapters` record: the transports the runtime serves. */
function runtimeAdapters(): string[] {
  class Probe extends IdempotencyRuntime {
    adapterKeys(): string[] {
      return Object.keys(this.adapters as Record<string, TransportAdapter>);
    }
  }
  return new Probe({} as IdempotencyService).adapterKeys();
}

const parsed = new Map<string, ts.SourceFile>();
function parse(file: string): ts.SourceFile {
  let source = parsed.get(file);
  if (!source) parsed.set(file, (source = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.ES2022, true)));
  return source;
}

function stringLiteralsOf(type: ts.TypeNode): string[] {
  if (ts.isUnionTypeNode(type)) return type.types.flatMap(stringLiteralsOf);
  if (ts.isLiteralTypeNode(type) && ts.isStringLiteral(type.literal)) return [type.literal.text];
  throw new Error(`unexpected member ${type.getText()} in a union of string literals`);
}

/** The one declaration in lib/ that `find` picks, with its file (files move; the declaration is what counts). */
function findDeclaration<T extends ts.Node>(what: string, find: (statement: ts.Statement) => T | undefined): { node: T; file: string } {
  const found: { node: T; file: string }[] = [];
  for (const file of sourceFiles(LIB)) {
    for (const statement of parse(file).statements) {
      const node = find(statement);
      if (node) found.push({ node, file: relative(ROOT, file) });
    }
  }
  if (found.length !== 1) throw new Error(`expected one declaration of ${what} in lib/, found ${found.length}: update registry.spec.ts`);
  return found[0];
}

/** The members of `type MethodKind = 'method' | ...` (the kinds of @Idempotent() methods without a request). */
function methodKinds(): string[] {
  const { node } = findDeclaration('type MethodKind', (s) =>
    ts.isTypeAliasDeclaration(s) && s.name.text === 'MethodKind' ? s : undefined,
  );
  return stringLiteralsOf(node.type);
}

/** The method kinds served by the transports of the registry (lib/nest/transports/registry.ts) that run methods without a request. */
function methodRunnerAdapters(): string[] {
  return TRANSPORTS.flatMap((transport) => (transport.reach === 'method' ? [...(transport as MethodAdapter).kinds] : []));
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return sourceFiles(path);
    return path.endsWith('.ts') && !path.endsWith('.d.ts') ? [path] : [];
  });
}

/** `Class.method` or `function` around a node. */
function enclosingName(node: ts.Node): string {
  for (let current: ts.Node | undefined = node.parent; current; current = current.parent) {
    if ((ts.isMethodDeclaration(current) || ts.isGetAccessor(current)) && current.name) {
      const owner = current.parent;
      const className = ts.isClassDeclaration(owner) && owner.name ? owner.name.text : '?';
      return `${className}.${current.name.getText()}`;
    }
    if (ts.isFunctionDeclaration(current) && current.name) return current.name.text;
  }
  return '<module>';
}

/** Every function in lib/ that derives a storage key from a client key (calls `storageKeyOf`), with where. */
function storageKeyCallers(): Map<string, string> {
  const callers = new Map<string, string>();
  for (const file of sourceFiles(LIB)) {
    const source = parse(file);
    const visit = (node: ts.Node): void => {
      if (ts.isCallExpression(node) && ts.isIdentifier(node.expression) && node.expression.text === 'storageKeyOf') {
        const { line } = source.getLineAndCharacterOfPosition(node.getStart());
        callers.set(enclosingName(node), `${relative(ROOT, file)}:${line + 1}`);
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return callers;
}

const drivers = Object.entries(CONFORMANCE_DRIVERS) as [EntryId, (typeof CONFORMANCE_DRIVERS)[EntryId]][];
const servedBy = (serves: string) => drivers.filter(([, driver]) => driver.serves === serves).map(([entry]) => entry);

describe('every entry point of the library has a conformance driver', () => {
  it('finds the entry points in the code (sanity: the readers still read something)', () => {
    expect(runtimeAdapters().length).toBeGreaterThan(0);
    expect(methodKinds().length).toBeGreaterThan(0);
    expect(storageKeyCallers().size).toBeGreaterThan(0);
  });

  it('each transport adapter of IdempotencyRuntime (its protected adapters record)', () => {
    const missing = runtimeAdapters().filter((key) => servedBy(`adapter:${key}`).length === 0);
    expect(missing).toEqual([]);
  });

  it("each request transport of the registry is one of the runtime's adapters, and the other way round", () => {
    const requests = TRANSPORTS.filter((transport) => transport.reach === 'request').map((transport) => transport.name);
    expect([...requests].sort()).toEqual([...runtimeAdapters()].sort());
  });

  it('each MethodKind (lib/nest/**/method-target.ts), and each method transport of the registry', () => {
    const kinds = methodKinds();
    expect([...methodRunnerAdapters()].sort()).toEqual([...kinds].sort());
    expect(kinds.filter((kind) => servedBy(`method:${kind}`).length === 0)).toEqual([]);
  });

  it('each function that turns a client key into a storage key is an entry point with a driver, or named here as none', () => {
    const unserved: string[] = [];
    for (const [caller, where] of storageKeyCallers()) {
      if (NOT_ENTRY_POINTS[caller]) continue;
      if (caller === 'IdempotencyRuntime.prepareFromPrincipal') continue; // the runtime: its adapters and method kinds, above
      if (servedBy(`caller:${caller}`).length === 0) unserved.push(`${caller} (${where})`);
    }
    expect(unserved).toEqual([]);
  });

  it('each transport adapter through both entries of the runtime: the method wrapper and IdempotencyInterceptor', () => {
    expect(typeof IdempotencyInterceptor).toBe('function');
    const missing: string[] = [];
    for (const key of runtimeAdapters()) {
      for (const path of ['wrapper', 'interceptor'] as const) {
        const found = drivers.some(([, driver]) => driver.serves === `adapter:${key}` && 'path' in driver && driver.path === path);
        if (!found) missing.push(`adapter:${key} via ${path}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('each way of serving an adapter or kind that needs a driver of its own', () => {
    const missing: string[] = [];
    for (const [serves, groups] of Object.entries(REQUIRED_DRIVERS)) {
      for (const group of groups)
        if (!group.some((entry) => servedBy(serves).includes(entry))) missing.push(`${serves}: ${group.join(' or ')}`);
    }
    expect(missing).toEqual([]);
  });

  it('each driver has its suite, test/conformance/<entry>.conformance.spec.ts, which runs describeTransportConformance', () => {
    const missing = drivers
      .map(([entry]) => join(__dirname, `${entry}.conformance.spec.ts`))
      .filter((file) => !existsSync(file) || !readFileSync(file, 'utf8').includes('describeTransportConformance('))
      .map((file) => relative(ROOT, file));
    expect(missing).toEqual([]);
  });

  it('each registered serving is still one the library has (no stale driver)', () => {
    const known = new Set([
      ...runtimeAdapters().map((key) => `adapter:${key}`),
      ...methodKinds().map((kind) => `method:${kind}`),
      ...[...storageKeyCallers().keys()].map((caller) => `caller:${caller}`),
    ]);
    expect(drivers.filter(([, driver]) => !known.has(driver.serves)).map(([entry]) => entry)).toEqual([]);
  });
});
