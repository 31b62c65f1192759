#!/usr/bin/env node
// Checks the package as users get it, not as the repository has it: builds and packs a
// copy of the sources, checks the published file list and the types with
// @arethetypeswrong/cli, then installs the tarball into two throwaway consumer projects
// (NestJS 11 CommonJS, NestJS 12 ESM) and boots a decorated app from each with plain
// `node`. The copy keeps `dist/` of the shared checkout untouched while others work in it.
//
// Usage: npm run test:package   (KEEP_PACKAGE_CHECK=1 keeps the temp dir for a post-mortem)
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const work = mkdtempSync(join(tmpdir(), 'nestjs-idempotency-package-'));
const stage = join(work, 'stage');
const startedAt = Date.now();
const failures = [];

/** Optional peers: the root entry point must load without any of them. */
const OPTIONAL_PEERS = ['ioredis', 'typeorm', '@nestjs/microservices', 'prom-client', '@opentelemetry/api', '@nestjs/terminus'];
/** Each subpath, and the peer it may need at load time (null: must load with none). */
const SUBPATHS = {
  'nestjs-idempotency': null,
  'nestjs-idempotency/testing': null,
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
  for (const entry of ['package.json', 'README.md', 'LICENSE', 'docs', 'lib', 'tsconfig.json', 'tsconfig.build.json']) {
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

  step('consumer projects: install the tarball from the registry cache');
  const consumers = [
    {
      name: 'nest11-cjs',
      type: 'commonjs',
      file: 'app.js',
      deps: { '@nestjs/common': '^11', '@nestjs/core': '^11', '@nestjs/platform-express': '^11' },
      platform: 'express',
    },
    {
      name: 'nest12-esm',
      type: 'module',
      file: 'app.mjs',
      deps: { '@nestjs/common': '^12', '@nestjs/core': '^12', '@nestjs/platform-fastify': '^12' },
      platform: 'fastify',
    },
  ];
  for (const consumer of consumers) {
    const dir = join(work, consumer.name);
    mkdirSync(dir);
    writeFileSync(
      join(dir, 'package.json'),
      JSON.stringify(
        {
          name: consumer.name,
          private: true,
          type: consumer.type,
          dependencies: { ...consumer.deps, 'reflect-metadata': '^0.2.0', rxjs: '^7.8.0', 'nestjs-idempotency': `file:${tarball}` },
        },
        null,
        2,
      ),
    );
    writeFileSync(join(dir, consumer.file), consumer.type === 'module' ? esmApp(consumer.platform) : cjsApp(consumer.platform));
    writeFileSync(join(dir, 'subpaths.cjs'), subpathProbe('cjs'));
    writeFileSync(join(dir, 'subpaths.mjs'), subpathProbe('esm'));
    run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline'], dir, { timeout: 240_000 });
    console.log(`  ${consumer.name}: installed (${((Date.now() - startedAt) / 1000).toFixed(0)} s)`);
  }

  for (const consumer of consumers) {
    const dir = join(work, consumer.name);
    step(`${consumer.name}: boot a decorated app with plain node and send a key twice`);
    const absent = OPTIONAL_PEERS.filter((peer) => !existsSync(join(dir, 'node_modules', ...peer.split('/'))));
    check(absent.length === OPTIONAL_PEERS.length, `no optional peer installed (${OPTIONAL_PEERS.join(', ')})`);
    const result = JSON.parse(run(process.execPath, [consumer.file], dir, { timeout: 60_000 }).trim().split('\n').pop());
    console.log(`  NestJS ${result.nest}, ${consumer.platform}: ${JSON.stringify(result.responses)}`);
    const [first, second] = result.responses;
    check(first.status === 201 && second.status === 201, 'both requests answer 201');
    check(first.replayed === null && second.replayed === 'true', 'the second answer carries Idempotent-Replayed: true');
    check(first.body === second.body, 'the replay has the same body');
    check(result.runs === 1, 'the handler ran once');

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

    step(`${consumer.name}: every entry point, with require and import, without optional peers`);
    for (const system of ['cjs', 'esm']) {
      const probe = JSON.parse(
        run(process.execPath, [`subpaths.${system === 'esm' ? 'mjs' : 'cjs'}`], dir)
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

  step('nest12-esm: the Prometheus and OpenTelemetry subpaths with their peers installed');
  const esmDir = join(work, 'nest12-esm');
  run('npm', ['install', '--no-audit', '--no-fund', '--prefer-offline', 'prom-client@^15', '@opentelemetry/api@^1'], esmDir, {
    timeout: 240_000,
  });
  for (const system of ['cjs', 'esm']) {
    const probe = JSON.parse(
      run(process.execPath, [`subpaths.${system === 'esm' ? 'mjs' : 'cjs'}`], esmDir)
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
console.log(JSON.stringify({ nest, runs, responses }));
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

@Module({
  imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), onEvent: [(event) => events.push(event)] })],
  controllers: [PaymentsController],
})
export class AppModule {}
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
