#!/usr/bin/env node
// Every Jest suite, in two passes (npm test's last step; `npm run test:jest`):
//
// 1. the suites that wait on real services, processes and brokers, two at a time
//    (`-w 2`): most of their time is spent waiting, not computing, so on a 2-core machine
//    two workers nearly halve the wall time (Jest's default is one worker there);
// 2. then, one at a time, the suites that assert a bound in time under a fault (an answer
//    within the client's timeout, a new key served within 5 s of a heal, a message sent
//    within seconds of a SIGKILL): run beside another suite, they would measure the
//    machine's load, not the library.
//
// A suite belongs to pass 2 when its assertions depend on how soon something happens
// under a fault; SERIAL below lists them (by folder, or by name for a few elsewhere).
//
// Usage: npm run test:jest [-- <paths or Jest options>]: the paths select suites as Jest's
// own do (each pass runs its share of them); options go to both passes.
// JEST_WORKERS=<n> sets pass 1's workers (default 2).
import { spawnSync } from 'node:child_process';

const SERIAL = new RegExp(
  [
    '/test/faults/',
    '/test/reliability/',
    '/test/outbox/.*reliability',
    '/test/prisma/stuck-connection',
    '/test/sql/deadline',
    '/test/redis/(blackhole|node-redis\\.outage|script-runner-deadlines|redis\\.hung|redis\\.store\\.outage)',
    '/test/nest/outermost-answer\\.timeout',
  ].join('|'),
);

const args = process.argv.slice(2);
const options = args.filter((arg) => arg.startsWith('-'));
const workers = process.env.JEST_WORKERS ?? '2';
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

function jest(paths, jestOptions, what) {
  if (paths.length === 0) return 0;
  const from = Date.now();
  console.log(`\n=== jest: ${what}, ${paths.length} suite(s)`);
  const result = spawnSync('npx', ['jest', ...jestOptions, ...options, ...paths.map(exactly)], { stdio: 'inherit' });
  console.log(`=== jest: ${what}: ${result.status === 0 ? 'passed' : 'FAILED'} in ${seconds(from)}`);
  return result.status ?? 1;
}

const concurrent = jest(
  suites.filter((path) => !SERIAL.test(path)),
  ['-w', workers],
  `the suites that can run at once (${workers} workers)`,
);
const serial = jest(
  suites.filter((path) => SERIAL.test(path)),
  ['-w', '1'],
  'the suites that time a fault, one at a time',
);
console.log(`\njest: ${suites.length} suites in ${seconds(started)}`);
process.exit(concurrent || serial);
