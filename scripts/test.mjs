#!/usr/bin/env node
// `npm test`, the command CI runs: the static checks, then every Jest suite.
//
// The checks (type-check, lint, the shape of lib/, the docs snippets) are independent
// single-process tools of 10–20 s each: they run two at a time, each one's output printed
// as a block when it ends, and all of them run even when one fails, so one run reports
// every problem. Jest runs only when they all pass (scripts/jest-all.mjs: its passes,
// its timings). Arguments go to Jest (`npm test -- test/core`).
import { spawn, spawnSync } from 'node:child_process';

const CHECKS = ['typecheck', 'lint', 'check-shape', 'check-docs'];
const PARALLEL = 2;

const started = Date.now();
const seconds = (from) => `${((Date.now() - from) / 1000).toFixed(0)} s`;

/** `npm run <script>`, its output kept for one block; resolves to whether it passed. */
function check(script) {
  return new Promise((resolve) => {
    const from = Date.now();
    const child = spawn('npm', ['run', '--silent', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('close', (code) => {
      const passed = code === 0;
      process.stdout.write(`\n=== npm run ${script}: ${passed ? 'passed' : `FAILED (exit ${code})`} in ${seconds(from)}\n${output}`);
      resolve(passed);
    });
  });
}

const queue = [...CHECKS];
const results = await Promise.all(
  Array.from({ length: PARALLEL }, async () => {
    const passed = [];
    for (let script = queue.shift(); script; script = queue.shift()) passed.push(await check(script));
    return passed.every(Boolean);
  }),
);
console.log(`\n=== checks: ${results.every(Boolean) ? 'passed' : 'FAILED'} in ${seconds(started)}`);
if (!results.every(Boolean)) process.exit(1);

const jest = spawnSync(process.execPath, ['scripts/jest-all.mjs', ...process.argv.slice(2)], { stdio: 'inherit' });
console.log(`\nnpm test: ${jest.status === 0 ? 'passed' : 'FAILED'} in ${seconds(started)}`);
process.exit(jest.status ?? 1);
