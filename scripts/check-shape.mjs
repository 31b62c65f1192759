#!/usr/bin/env node
// The shape lib/ keeps (lib/ARCHITECTURE.md): no import cycle among lib/**/*.ts, counting
// `import type` and re-exports as well (a cycle of types is still two files that cannot be
// read or moved apart), and no file over MAX_LINES lines (one role per file). Prints each
// finding and exits 1 on any; `npm test` runs it.
import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const MAX_LINES = Number(process.env.MAX_LINES ?? 400);
const root = resolve(process.argv[2] ?? 'lib');

function sourcesUnder(folder) {
  const found = [];
  for (const name of readdirSync(folder)) {
    const path = join(folder, name);
    if (statSync(path).isDirectory()) found.push(...sourcesUnder(path));
    else if (path.endsWith('.ts') && !path.endsWith('.d.ts')) found.push(path);
  }
  return found;
}

/** The lib/ files a file imports or re-exports from (relative specifiers only: packages are not lib/). */
function importsOf(file, known) {
  const text = readFileSync(file, 'utf8');
  const targets = new Set();
  for (const match of text.matchAll(/(?:^|\n)\s*(?:import|export)\s[^;]*?from\s*['"](\.{1,2}\/[^'"]+)['"]/g)) {
    let target = resolve(dirname(file), match[1]).replace(/\.js$/, '.ts');
    if (!target.endsWith('.ts')) target += '.ts';
    if (!existsSync(target)) target = join(target.replace(/\.ts$/, ''), 'index.ts');
    if (known.has(target) && target !== file) targets.add(target);
  }
  return targets;
}

/** Strongly connected components of more than one file (Tarjan), i.e. the import cycles. */
function cyclesOf(graph) {
  let counter = 0;
  const index = new Map();
  const low = new Map();
  const stack = [];
  const onStack = new Set();
  const cycles = [];
  const visit = (file) => {
    index.set(file, counter);
    low.set(file, counter);
    counter++;
    stack.push(file);
    onStack.add(file);
    for (const next of graph.get(file)) {
      if (!index.has(next)) {
        visit(next);
        low.set(file, Math.min(low.get(file), low.get(next)));
      } else if (onStack.has(next)) {
        low.set(file, Math.min(low.get(file), index.get(next)));
      }
    }
    if (low.get(file) !== index.get(file)) return;
    const component = [];
    let member;
    do {
      member = stack.pop();
      onStack.delete(member);
      component.push(member);
    } while (member !== file);
    if (component.length > 1) cycles.push(component);
  };
  for (const file of graph.keys()) if (!index.has(file)) visit(file);
  return cycles;
}

const files = sourcesUnder(root);
const known = new Set(files);
const graph = new Map(files.map((file) => [file, importsOf(file, known)]));
const shown = (file) => relative(process.cwd(), file);
const problems = [];
for (const cycle of cyclesOf(graph)) problems.push(`import cycle of ${cycle.length} files: ${cycle.map(shown).sort().join(', ')}`);
for (const file of files) {
  const lines = readFileSync(file, 'utf8').split('\n').length;
  if (lines > MAX_LINES) problems.push(`${shown(file)}: ${lines} lines, over ${MAX_LINES}: split it by role`);
}
for (const problem of problems) console.error(`check-shape: ${problem}`);
console.log(`check-shape: ${files.length} files under ${shown(root)}, ${problems.length ? `${problems.length} problem(s)` : 'no import cycle, none over ' + MAX_LINES + ' lines'}`);
process.exit(problems.length ? 1 : 0);
