#!/usr/bin/env node
// Every Jest suite, in three passes (npm test's last step; `npm run test:jest`):
//
// 1. the suites that wait on real services, processes and brokers, three at a time
//    (`-w 3`): on a 2-core machine two workers left the CPU 40 % idle (each suite waits
//    on a server, a timer or a child process for much of its time), a third fills it
//    (pass 1: 288 s with two workers, 214 s with three, quiet machine);
// 2. then the suites that assert a bound in time under a fault (an answer within the
//    client's timeout, a new key served within 5 s of a heal, a message sent within
//    seconds of a SIGKILL), three at a time among themselves only: they mostly wait
//    (stalls, deadlines, leases), so beside one another they measure what they measured
//    alone (slowest 503 4.00–4.05 s one at a time, 4.00–4.03 s three at a time; probes
//    after a heal up to 2.2 s either way), which beside CPU-bound suites they would not:
//    a Redis Cluster's reconnection after a stall outlasted its 2 s bound once, beside
//    the invariant harnesses;
// 3. then the invariant harnesses (test/reliability/invariant.*: application processes
//    under load, killed and restarted, CPU-bound), three at a time. They assert the
//    invariant, not a time, and the fault suites are better off without them.
//
// TIMED and HARNESSES below list the suites of passes 2 and 3 (by folder, or by name).
//
// The docs apps are built by one process for the run (test/docs/support/build-server.mjs:
// 31 apps in 7 s instead of 41 s of tsc runs). Each pass's per-suite times are printed at
// the end (the slowest) and kept in .tmp/jest-timings/<config>/.
//
// Usage: npm run test:jest [-- <paths or Jest options>]: the paths select suites as Jest's
// own do (each pass runs its share of them); options go to every pass.
// JEST_WORKERS=<n> sets pass 1's workers, JEST_FAULT_WORKERS=<n> passes 2 and 3's (default 3 and 3).
import { fork, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';

const TIMED = new RegExp(
  [
    '/test/faults/',
    '/test/reliability/(?!invariant\\.)',
    '/test/outbox/.*reliability',
    '/test/prisma/stuck-connection',
    '/test/sql/deadline',
    '/test/redis/(blackhole|node-redis\\.outage|script-runner-deadlines|redis\\.hung|redis\\.store\\.outage)',
    '/test/nest/outermost-answer\\.timeout',
  ].join('|'),
);

/** The invariant harnesses: application processes under load, CPU-bound, after the fault suites (pass 3). */
const HARNESSES = /\/test\/reliability\/invariant\./;

const args = process.argv.slice(2);
const options = args.filter((arg) => arg.startsWith('-'));
const workers = process.env.JEST_WORKERS ?? '3';
const faultWorkers = process.env.JEST_FAULT_WORKERS ?? '3';
const started = Date.now();
const seconds = (from) => `${((Date.now() - from) / 1000).toFixed(0)} s`;

// The suites the arguments select, as Jest lists them (absolute paths), split in two.
const listed = spawnSync('npx', ['jest', '--listTests', '--json', ...args], { encoding: 'utf8', maxBuffer: 16 * 1024 * 1024 });
if (listed.status !== 0) {
  process.stderr.write(listed.stderr);
  process.exit(listed.status ?? 1);
}
const suites = JSON.parse(listed.stdout).sort();
const exactly = (path) => `^${path.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`;

// Each pass's per-suite times (Jest's --json report), for the summary at the end.
// One folder per Jest config, so that a leg on another config (NestJS 11, TypeORM 0.3) keeps npm test's.
const config = options.find((option) => option.startsWith('--config='))?.slice('--config='.length) ?? 'jest.config.js';
const TIMINGS = join(process.cwd(), '.tmp', 'jest-timings', config.replace(/[^\w.-]+/g, '_'));
rmSync(TIMINGS, { recursive: true, force: true });
mkdirSync(TIMINGS, { recursive: true });
const reports = [];

function jest(paths, jestOptions, what) {
  if (paths.length === 0) return 0;
  const from = Date.now();
  console.log(`\n=== jest: ${what}, ${paths.length} suite(s)`);
  const report = join(TIMINGS, `pass-${reports.length + 1}.json`);
  reports.push(report);
  const result = spawnSync('npx', ['jest', ...jestOptions, '--json', `--outputFile=${report}`, ...options, ...paths.map(exactly)], {
    stdio: 'inherit',
  });
  console.log(`=== jest: ${what}: ${result.status === 0 ? 'passed' : 'FAILED'} in ${seconds(from)}`);
  return result.status ?? 1;
}

// The docs apps' builds, served by one process for the run (test/docs/support/build-server.mjs),
// when the run has docs suites (they alone build apps).
const buildServer = suites.some((path) => path.includes('/test/docs/')) ? await startBuildServer() : undefined;

async function startBuildServer() {
  const socket = join(tmpdir(), `docs-build-${process.pid}.sock`);
  const server = fork(join(import.meta.dirname, '..', 'test', 'docs', 'support', 'build-server.mjs'), [socket], { stdio: 'inherit' });
  await new Promise((resolve, reject) => {
    server.once('message', resolve);
    server.once('exit', (code) => reject(new Error(`the docs build server exited (${code}) before it was ready`)));
  });
  process.env.DOCS_BUILD_SOCKET = socket;
  return server;
}

const statuses = [
  jest(
    suites.filter((path) => !TIMED.test(path) && !HARNESSES.test(path)),
    ['-w', workers],
    `the suites that can run at once (${workers} workers)`,
  ),
  jest(
    suites.filter((path) => TIMED.test(path)),
    ['-w', faultWorkers],
    `the suites that time a fault (${faultWorkers} workers)`,
  ),
  jest(
    suites.filter((path) => HARNESSES.test(path)),
    ['-w', faultWorkers],
    `the invariant harnesses (${faultWorkers} workers)`,
  ),
];

buildServer?.kill();

// Where the time went: the slowest suites of each pass (all of them in .tmp/jest-timings/<config>/).
for (const [index, report] of reports.entries()) {
  if (!existsSync(report)) continue;
  const results = JSON.parse(readFileSync(report, 'utf8')).testResults;
  const times = results
    .map((suite) => ({ path: relative(process.cwd(), suite.name), seconds: (suite.endTime - suite.startTime) / 1000 }))
    .sort((a, b) => b.seconds - a.seconds);
  const total = times.reduce((sum, { seconds }) => sum + seconds, 0);
  console.log(`\npass ${index + 1}: ${times.length} suites, ${total.toFixed(0)} s of suite time; the slowest:`);
  for (const { path, seconds } of times.slice(0, 12)) console.log(`  ${seconds.toFixed(1).padStart(6)} s  ${path}`);
}
console.log(`\njest: ${suites.length} suites in ${seconds(started)}`);
process.exit(statuses.find((status) => status !== 0) ?? 0);
