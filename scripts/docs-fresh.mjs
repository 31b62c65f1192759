#!/usr/bin/env node
// The docs on a fresh install: every docs page with an application, built and run as a
// new user meets it, in a folder outside the repository that has only what the page's
// own install lines put there.
//
// 1. builds a copy of the sources and packs it (`npm pack`), once per run;
// 2. installs each page's packages: a fresh folder under the run's temp dir holding the
//    page's package.json only, where the page's install lines run in the order written
//    (npm against the registry, `--prefer-offline` on the shared npm cache, the tarball
//    in place of `nestjs-idempotency`). A missing package or a peer conflict (ERESOLVE)
//    fails the page. Pages with the same package.json and install lines share one
//    install; pages whose lines start alike share the install of those first lines,
//    copied into each page's folder before its own lines run (what those lines make in
//    one run, against one registry state). Three npm runs at a time.
// 3. runs the docs suites (test/docs/) with DOCS_FRESH_DIR and DOCS_FRESH_TARBALL set, from
//    the start (a suite waits for its page's install, whose lock this script holds):
//    test/docs/support/doc-app.ts builds each page's files inside its install, with the
//    TypeScript that install brought, and each suite runs the app and the page's commands;
// 4. prints each page's install and suite times, and the total.
//
// Usage: npm run test:docs:fresh [-- <jest args, e.g. test/docs/getting-started>]
//   DOCS_NPM_CACHE=<dir>   the npm cache to use (default: npm's own, ~/.npm), kept across runs
//   DOCS_WORKERS=<n>       Jest workers (default 2)
//   DOCS_LIB_REF=<commit>  pack that commit's lib/, package.json and build config instead of the working tree's
//   KEEP_DOCS_FRESH=1      keep the run's folder (installs, apps, timings) for a post-mortem
import { execFile, execFileSync, spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { docAppsOf, freshInstallKeyOf, installLinesOf } from './doc-apps.mjs';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const started = Date.now();
const seconds = (from) => ((Date.now() - from) / 1000).toFixed(1);
const work = mkdtempSync(join(tmpdir(), 'nestjs-idempotency-docs-'));
let status;

try {
  console.log(`docs on a fresh install, in ${work}; npm cache: ${process.env.DOCS_NPM_CACHE ?? 'npm default'}`);
  const tarball = pack();
  const env = {
    ...process.env,
    DOCS_FRESH_DIR: work,
    DOCS_FRESH_TARBALL: tarball,
    npm_config_update_notifier: 'false',
    ...(process.env.DOCS_NPM_CACHE ? { npm_config_cache: process.env.DOCS_NPM_CACHE } : {}),
  };
  const jestArgs = process.argv.slice(2).length ? process.argv.slice(2) : [join(root, 'test', 'docs') + '/'];

  // The suites start at once: each waits for its page's install (doc-app.ts waits on the lock installAll holds).
  const installStarted = Date.now();
  const plans = plannedInstalls(jestArgs);
  for (const plan of plans) lock(plan.key);
  const installing = installAll(plans, tarball, env).then((installs) => {
    console.log(`\ninstalled what ${installs.length} page set-up(s) need in ${seconds(installStarted)} s`);
    return installs;
  });
  const report = join(work, 'jest.json');
  const jest = spawn(
    process.execPath,
    [
      join(root, 'node_modules', 'jest', 'bin', 'jest.js'),
      ...jestArgs,
      '-w',
      process.env.DOCS_WORKERS ?? '2',
      '--json',
      '--outputFile',
      report,
    ],
    { cwd: root, env, stdio: 'inherit' },
  );
  status = await new Promise((resolve) => jest.on('exit', (code) => resolve(code ?? 1)));
  const installs = await installing;
  printTimes(installs, existsSync(report) ? JSON.parse(readFileSync(report, 'utf8')).testResults : []);
  console.log(`\ndocs on a fresh install ${status === 0 ? 'passed' : 'FAILED'} in ${seconds(started)} s`);
} catch (error) {
  console.error(error.message);
  status = 1;
} finally {
  if (process.env.KEEP_DOCS_FRESH) console.log(`kept ${work}`);
  else rmSync(work, { recursive: true, force: true });
}
process.exit(status);

/** The package as `npm pack` makes it, from a copy of the sources, so dist/ of the checkout stays untouched. */
function pack() {
  const packStarted = Date.now();
  const stage = join(work, 'stage');
  mkdirSync(join(stage, 'scripts'), { recursive: true });
  for (const entry of ['package.json', 'README.md', 'CHANGELOG.md', 'LICENSE', 'docs', 'lib', 'tsconfig.json', 'tsconfig.build.json']) {
    if (existsSync(join(root, entry))) cpSync(join(root, entry), join(stage, entry), { recursive: true });
  }
  if (process.env.DOCS_LIB_REF) {
    const sources = ['lib', 'package.json', 'tsconfig.json', 'tsconfig.build.json'];
    rmSync(join(stage, 'lib'), { recursive: true, force: true });
    execFileSync('bash', ['-c', `git archive "$0" ${sources.join(' ')} | tar -x -C "$1"`, process.env.DOCS_LIB_REF, stage], { cwd: root });
  }
  cpSync(join(root, 'scripts', 'build.mjs'), join(stage, 'scripts', 'build.mjs'));
  symlinkSync(join(root, 'node_modules'), join(stage, 'node_modules'), 'dir');
  const build = spawnSync('npm', ['run', 'build'], { cwd: stage, encoding: 'utf8' });
  if (build.status !== 0) throw new Error(`npm run build of the package failed:\n${build.stdout}${build.stderr}`);
  const packed = execFileSync('npm', ['pack', '--silent', '--pack-destination', work], { cwd: stage, encoding: 'utf8' })
    .trim()
    .split('\n')
    .pop();
  rmSync(stage, { recursive: true, force: true });
  console.log(`packed ${packed} in ${seconds(packStarted)} s`);
  return join(work, packed);
}

/**
 * The installs the docs suites will ask for: per page with an application and a suite the
 * Jest arguments select, per package.json its apps use (their own, or getting-started's)
 * and the page's install lines (getting-started's for a page that shows none), named as
 * test/docs/support/doc-app.ts names them. An install a suite asks for that is not here,
 * doc-app.ts makes itself.
 */
function plannedInstalls(jestArgs) {
  const docs = join(root, 'docs');
  const gettingStarted = readFileSync(join(docs, 'getting-started.md'), 'utf8');
  const projectPackage = docAppsOf(gettingStarted).get('default')?.get('package.json')?.code ?? '{}\n';
  const patterns = jestArgs.filter((arg) => !arg.startsWith('-')).map((arg) => new RegExp(arg));
  const plans = new Map();
  for (const name of readdirSync(docs).filter((file) => file.endsWith('.md'))) {
    const page = name.replace(/\.md$/, '');
    const spec = join(root, 'test', 'docs', `${page}.e2e-spec.ts`);
    if (!existsSync(spec) || (patterns.length > 0 && !patterns.some((pattern) => pattern.test(spec)))) continue;
    const markdown = readFileSync(join(docs, name), 'utf8');
    const own = installLinesOf(markdown);
    const lines = own.length > 0 ? own : installLinesOf(gettingStarted);
    for (const files of docAppsOf(markdown).values()) {
      const packageJson = files.get('package.json')?.code ?? projectPackage;
      const key = freshInstallKeyOf(packageJson, lines);
      if (!plans.has(key)) plans.set(key, { key, packageJson, lines, pages: [] });
      if (!plans.get(key).pages.includes(page)) plans.get(key).pages.push(page);
    }
  }
  return [...plans.values()];
}

/**
 * Runs every plan's install lines in a folder of its own, `install-<key>`, marked ready for
 * doc-app.ts. The first lines several plans share (with the same package.json) are
 * installed once, in a folder each of them copies before running the rest of its lines.
 * Resolves to each plan's pages and time; a plan whose lines fail is reported, and its
 * pages' suites fail when they run the install again.
 */
async function installAll(plans, tarball, env) {
  // Every prefix of every plan's lines, and the distinct lines that follow it.
  const nodes = new Map();
  for (const plan of plans) {
    for (let length = 0; length <= plan.lines.length; length++) {
      const key = freshInstallKeyOf(plan.packageJson, plan.lines.slice(0, length));
      if (!nodes.has(key))
        nodes.set(key, { key, packageJson: plan.packageJson, lines: plan.lines.slice(0, length), next: new Set(), final: false });
      const node = nodes.get(key);
      if (length < plan.lines.length) node.next.add(plan.lines[length]);
      else node.final = true;
    }
  }
  // A folder for each plan, and one where plans part (or one ends and another goes on).
  const kept = (node) => node.final || node.next.size > 1;
  const dirOf = (node) => join(work, `${node.final ? 'install' : 'prefix'}-${node.key}`);
  const npmEnv = {
    ...env,
    npm_config_prefer_offline: 'true',
    npm_config_audit: 'false',
    npm_config_fund: 'false',
    npm_config_legacy_peer_deps: 'false',
    npm_config_force: 'false',
  };
  const gate = limiter(3);
  const built = new Map();
  const build = (node) => {
    if (!built.has(node.key)) {
      built.set(
        node.key,
        (async () => {
          let base;
          for (let length = node.lines.length - 1; length > 0 && !base; length--) {
            const candidate = nodes.get(freshInstallKeyOf(node.packageJson, node.lines.slice(0, length)));
            if (kept(candidate)) base = candidate;
          }
          const shared = base ? await build(base) : undefined;
          const dir = dirOf(node);
          const own = node.lines.slice(base ? base.lines.length : 0);
          let ownStarted = 0;
          await gate(async () => {
            ownStarted = Date.now();
            if (base) {
              cpSync(dirOf(base), dir, { recursive: true, verbatimSymlinks: true });
              rmSync(join(dir, '.ready'), { force: true });
            } else {
              mkdirSync(dir, { recursive: true });
              writeFileSync(join(dir, 'package.json'), node.packageJson);
            }
            for (const line of own) {
              const command = line.replace(/(?<=\s)nestjs-idempotency(?=\s|$)/g, tarball);
              try {
                await exec('bash', ['-c', command], dir, npmEnv);
              } catch (error) {
                throw new Error(`install line \`${line}\` failed in a fresh folder (${dir}):\n${error.message}`, { cause: error });
              }
            }
          });
          if (node.final) {
            writeFileSync(join(dir, '.ready'), new Date().toISOString());
            unlock(node.key);
          }
          const ownSeconds = (Date.now() - ownStarted) / 1000;
          return { seconds: (shared?.seconds ?? 0) + ownSeconds, ownSeconds, sharedLines: base?.lines.length ?? 0 };
        })(),
      );
    }
    return built.get(node.key);
  };
  return Promise.all(
    plans.map(async (plan) => {
      try {
        return { pages: plan.pages, lines: plan.lines.length, ...(await build(nodes.get(plan.key))) };
      } catch (error) {
        console.error(`docs/${plan.pages.join('.md, docs/')}.md: ${error.message}`);
        // The page's suite then runs the install itself, and fails with this same error.
        rmSync(join(work, `install-${plan.key}`), { recursive: true, force: true });
        unlock(plan.key);
        return { pages: plan.pages, lines: plan.lines.length, failed: true };
      }
    }),
  );
}

/** Each page's install (its lines, those it shared with other pages, the seconds of its own) and suite. */
function printTimes(installs, suites) {
  const installOf = new Map();
  for (const install of installs) for (const page of install.pages) if (!installOf.has(page)) installOf.set(page, install);
  console.log('\npage                    install: lines (shared)  own s   all s      suite s  result');
  for (const suite of [...suites].sort((a, b) => a.name.localeCompare(b.name))) {
    const page = relative(join(root, 'test', 'docs'), suite.name).replace(/\.e2e-spec\.ts$/, '');
    const install = installOf.get(page);
    const installText = !install
      ? '-'.padEnd(40)
      : install.failed
        ? 'FAILED'.padEnd(40)
        : `${`${install.lines} (${install.sharedLines})`.padEnd(16)}${install.ownSeconds.toFixed(1).padStart(6)}${install.seconds.toFixed(1).padStart(8)}`.padEnd(
            40,
          );
    console.log(`${page.padEnd(24)}${installText}${((suite.endTime - suite.startTime) / 1000).toFixed(1).padStart(7)}  ${suite.status}`);
  }
}

/** doc-app.ts's lock of an install (`once()`): a suite that needs it waits until installAll has made it. */
function lock(key) {
  const dir = join(work, `install-${key}.lock`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'pid'), String(process.pid));
}

function unlock(key) {
  rmSync(join(work, `install-${key}.lock`), { recursive: true, force: true });
}

/** At most `size` of the functions given run at once. */
function limiter(size) {
  let running = 0;
  const waiting = [];
  return async (fn) => {
    while (running >= size) await new Promise((resolve) => waiting.push(resolve));
    running++;
    try {
      return await fn();
    } finally {
      running--;
      waiting.shift()?.();
    }
  };
}

function exec(command, args, cwd, env) {
  return new Promise((resolve, reject) =>
    execFile(command, args, { cwd, env, maxBuffer: 64 * 1024 * 1024 }, (error, stdout, stderr) =>
      error ? reject(new Error(`${stdout}${stderr}`)) : resolve(stdout),
    ),
  );
}
