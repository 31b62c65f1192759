import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { appendFileSync, copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createConnection } from 'node:net';
import { dirname, join, relative } from 'node:path';
import { freePort, waitFor } from '../../messages/support.js';

/**
 * A documentation page's applications, built and run as a user meets them. Every app a
 * page shows as files (```ts file=src/main.ts app=redis, see scripts/doc-apps.mjs) is
 * written to a folder of its own, compiled by `tsc` with its tsconfig.json, and started
 * like the page's `npm start` (`node dist/main.js`). A page that shows no package.json or
 * tsconfig.json gets getting-started's, which the pages point to (`strict: true`).
 *
 * Two ways to get the packages the apps import:
 *
 * - by default (`npm test`), the repository's own install: the package is built once per
 *   content of lib/ into `.tmp/docs-apps/pkg-<hash>/node_modules/nestjs-idempotency`, the
 *   apps live beside it, and Node finds everything else in the repository's node_modules;
 * - on a fresh install (`npm run test:docs:fresh`, scripts/docs-fresh.mjs, which sets
 *   DOCS_FRESH_DIR and DOCS_FRESH_TARBALL): every page gets a folder outside the
 *   repository holding only the page's package.json, where the page's own install lines
 *   (```bash blocks: `npm install ...`, `npm pkg set ...`) run in the order written, with
 *   the packed package in place of `nestjs-idempotency`. A package no line installs, or a
 *   peer conflict (ERESOLVE), fails the page. Pages whose install lines and package.json
 *   are the same share one install.
 */
export type AppFiles = Map<string, { code: string; lang?: string; line?: number }>;

export const root = join(__dirname, '..', '..', '..');

/** The fresh-install run's folder and the packed package (scripts/docs-fresh.mjs), or undefined on the repository's install. */
const FRESH_DIR = process.env.DOCS_FRESH_DIR;
const FRESH_TARBALL = process.env.DOCS_FRESH_TARBALL;
export const freshInstall = FRESH_DIR !== undefined;

// The reader is shared with scripts/check-docs.mjs, an ES module; Jest's transform loads it.
const {
  docAppsOf,
  installLinesOf: installLinesIn,
  freshInstallKeyOf,
} = require('../../../scripts/doc-apps.mjs') as {
  docAppsOf: (markdown: string) => Map<string, AppFiles>;
  installLinesOf: (markdown: string) => string[];
  freshInstallKeyOf: (packageJson: string, lines: readonly string[]) => string;
};

/**
 * Runs a command to its end and resolves to its standard output; rejects with both its
 * outputs, interleaved, when it exits non-zero. Standard error stays out of the result:
 * curl's progress meter (a page's `curl -i` without `-s`, its output piped) could land in
 * the middle of a status line and hide it from the test reading it.
 */
export function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let output = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
      output += chunk;
    });
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('close', (code) =>
      code === 0 ? resolve(stdout) : reject(new Error(`${command} ${args.join(' ')} (in ${cwd}) exited ${code}:\n${output}`)),
    );
  });
}

/**
 * The apps of docs/<page>.md by name (`default` for blocks without `app=`), each with
 * getting-started's package.json and tsconfig.json unless the page shows its own.
 */
export function pageApps(page: string): Map<string, AppFiles> {
  const apps = docAppsOf(readFileSync(join(root, 'docs', `${page}.md`), 'utf8'));
  const gettingStarted = docAppsOf(readFileSync(join(root, 'docs', 'getting-started.md'), 'utf8')).get('default')!;
  const projectFiles: AppFiles = new Map([...gettingStarted].filter(([path]) => path === 'package.json' || path === 'tsconfig.json'));
  return new Map([...apps].map(([name, files]) => [name, new Map([...projectFiles, ...files])]));
}

/**
 * Where the package is built from: the working tree, or with `DOCS_LIB_REF=<commit>` (e.g.
 * `HEAD`) that commit's lib/, so that a page can be checked while lib/ is being edited.
 */
const LIB_REF = process.env.DOCS_LIB_REF;
const SOURCES = ['lib', 'package.json', 'tsconfig.json', 'tsconfig.build.json'];

/** What buildPackage() makes, in the hash too: a change of it builds the package again. */
const BUILD_SHAPE = 'dist/esm + dist/cjs';

function libHash(): string {
  if (LIB_REF) {
    const tree = spawnSync('git', ['rev-parse', ...SOURCES.map((source) => `${LIB_REF}:${source}`)], { cwd: root, encoding: 'utf8' });
    if (tree.status !== 0) throw new Error(`DOCS_LIB_REF=${LIB_REF}: ${tree.stderr}`);
    return createHash('sha256').update(tree.stdout.trim()).update(LIB_REF).update(BUILD_SHAPE).digest('hex').slice(0, 16);
  }
  const hash = createHash('sha256').update(BUILD_SHAPE);
  const walk = (dir: string) => {
    for (const name of readdirSync(dir).sort()) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else hash.update(relative(root, path)).update('\0').update(readFileSync(path)).update('\0');
    }
  };
  walk(join(root, 'lib'));
  for (const file of SOURCES.slice(1)) hash.update(readFileSync(join(root, file)));
  return hash.digest('hex').slice(0, 16);
}

/** The folder holding lib/ and the build's config: the repository, or DOCS_LIB_REF's export of them. */
async function sourcesDir(home: string): Promise<string> {
  if (!LIB_REF) return root;
  const dir = join(home, 'sources');
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  await run('bash', ['-c', `git archive ${LIB_REF} ${SOURCES.join(' ')} | tar -x -C "${dir}"`], root);
  return dir;
}

function processAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Runs `build` once for `home` (its `.ready` marker): suites running at the same time wait
 * for the one that builds it.
 */
async function once(home: string, what: string, build: () => Promise<void>): Promise<string> {
  const ready = join(home, '.ready');
  const lock = `${home}.lock`;
  mkdirSync(dirname(home), { recursive: true });
  for (;;) {
    if (existsSync(ready)) return home;
    try {
      mkdirSync(lock);
    } catch {
      let owner = 0;
      try {
        owner = Number(readFileSync(join(lock, 'pid'), 'utf8'));
      } catch {
        // the builder has not written its pid yet, or has just finished
      }
      if (owner && !processAlive(owner)) rmSync(lock, { recursive: true, force: true });
      else await waitFor(`another suite to ${what}`, () => existsSync(ready) || !existsSync(lock), 600_000);
      continue;
    }
    try {
      writeFileSync(join(lock, 'pid'), String(process.pid));
      if (!existsSync(ready)) {
        await build();
        writeFileSync(ready, new Date().toISOString());
      }
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  }
}

/**
 * The folder whose node_modules holds the package as npm installs it (package.json,
 * dist/cjs and dist/esm), built once for this content of lib/, for the apps on the
 * repository's install.
 */
export async function installedPackage(): Promise<string> {
  const home = join(root, '.tmp', 'docs-apps', `pkg-${libHash()}`);
  return once(home, 'build the package for the docs apps', async () =>
    buildPackage(join(home, 'node_modules', 'nestjs-idempotency'), await sourcesDir(home)),
  );
}

async function buildPackage(target: string, sources: string): Promise<void> {
  rmSync(target, { recursive: true, force: true });
  mkdirSync(target, { recursive: true });
  copyFileSync(join(sources, 'package.json'), join(target, 'package.json'));
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  // As scripts/build.mjs builds the published package: ES modules for `import`, CommonJS for `require`.
  const builds = [
    { dir: 'esm', type: 'module', args: ['--module', 'ES2022', '--moduleResolution', 'Bundler'] },
    { dir: 'cjs', type: 'commonjs', args: ['--module', 'CommonJS', '--moduleResolution', 'Node10', '--ignoreDeprecations', '6.0'] },
  ];
  await Promise.all(
    builds.map(async ({ dir, type, args }) => {
      const out = join(target, 'dist', dir);
      mkdirSync(out, { recursive: true });
      await run(process.execPath, [tsc, '-p', 'tsconfig.build.json', '--outDir', out, ...args], sources);
      writeFileSync(join(out, 'package.json'), JSON.stringify({ type }));
    }),
  );
}

/** The install lines of docs/<page>.md in the order written (scripts/doc-apps.mjs). */
export function installLinesOf(page: string): string[] {
  return installLinesIn(readFileSync(join(root, 'docs', `${page}.md`), 'utf8'));
}

/** The install lines of a page with none of its own: getting-started's, whose project it builds on, as it says. */
export function freshInstallLinesOf(page: string): string[] {
  const own = installLinesOf(page);
  return own.length > 0 ? own : installLinesOf('getting-started');
}

/** The folder of a page's fresh install: one per package.json and install lines (scripts/docs-fresh.mjs makes them first). */
export function freshInstallKey(packageJson: string, lines: readonly string[]): string {
  return freshInstallKeyOf(packageJson, lines);
}

function record(entry: Record<string, unknown>): void {
  if (FRESH_DIR) appendFileSync(join(FRESH_DIR, 'timings.jsonl'), JSON.stringify(entry) + '\n');
}

/**
 * A fresh folder outside the repository for docs/<page>.md: its package.json only, then
 * the page's install lines in order (npm against the registry, the shared cache first),
 * with the packed package for `nestjs-idempotency`. Installed once per run for each
 * distinct package.json and set of lines.
 */
async function freshHome(page: string, packageJson: string): Promise<string> {
  const lines = freshInstallLinesOf(page);
  const home = join(FRESH_DIR!, `install-${freshInstallKey(packageJson, lines)}`);
  const started = Date.now();
  let installed = false;
  await once(home, `install the packages of docs/${page}.md`, async () => {
    installed = true;
    rmSync(home, { recursive: true, force: true });
    mkdirSync(home, { recursive: true });
    writeFileSync(join(home, 'package.json'), packageJson);
    const env = {
      ...process.env,
      npm_config_prefer_offline: 'true',
      npm_config_audit: 'false',
      npm_config_fund: 'false',
      npm_config_update_notifier: 'false',
      npm_config_legacy_peer_deps: 'false',
      npm_config_force: 'false',
    };
    for (const line of lines) {
      const command = line.replace(/(?<=\s)nestjs-idempotency(?=\s|$)/g, FRESH_TARBALL!);
      const lineStarted = Date.now();
      try {
        await run('bash', ['-c', command], home, env);
      } catch (error) {
        throw new Error(`docs/${page}.md, install line \`${line}\` failed in a fresh folder:\n${(error as Error).message}`, {
          cause: error,
        });
      }
      record({ page, install: home, line, seconds: (Date.now() - lineStarted) / 1000 });
    }
  });
  record({ page, install: home, lines, seconds: (Date.now() - started) / 1000, shared: !installed });
  return home;
}

/**
 * The folder of an installed package as the app in `dir` resolves it (its node_modules,
 * or a parent's): the page's fresh install, or the repository's.
 */
export function packagePath(dir: string, name: string): string {
  for (let at = dir; ; at = dirname(at)) {
    const candidate = join(at, 'node_modules', ...name.split('/'));
    if (existsSync(join(candidate, 'package.json'))) return candidate;
    if (dirname(at) === at)
      throw new Error(`${name} is not installed for the app in ${dir}${freshInstall ? ' (no install line of the page installs it)' : ''}`);
  }
}

const made: string[] = [];

/**
 * Writes each named app of docs/<page>.md to a folder of its own and builds it with `tsc
 * -p <tsconfig>` (the page's `npm run build`) from the app's install; resolves to the
 * folders by app name. `extra` adds files a page tells the reader to take from another
 * page; `build: false` only writes the files (for a page whose build runs a generator first).
 */
export async function buildPageApps(
  page: string,
  names: string[],
  options: { tsconfig?: string; extra?: Record<string, AppFiles>; build?: boolean } = {},
): Promise<Map<string, string>> {
  const apps = pageApps(page);
  const dirs = new Map<string, string>();
  await Promise.all(
    names.map(async (name) => {
      const files = apps.get(name) ?? options.extra?.[name];
      if (!files) throw new Error(`docs/${page}.md shows no app "${name}" (it shows: ${[...apps.keys()].join(', ')})`);
      const home = freshInstall ? await freshHome(page, files.get('package.json')?.code ?? '{}\n') : await installedPackage();
      const dir = join(home, `${page}-${name}-${process.pid}`);
      rmSync(dir, { recursive: true, force: true });
      made.push(dir);
      for (const [path, { code }] of files) {
        mkdirSync(dirname(join(dir, path)), { recursive: true });
        writeFileSync(join(dir, path), code);
      }
      if (options.build !== false) await buildApp(dir, options.tsconfig);
      dirs.set(name, dir);
    }),
  );
  return dirs;
}

/**
 * The page's `npm run build`: the app's own TypeScript compiler on its tsconfig. On the
 * repository's install, when the test run serves builds (DOCS_BUILD_SOCKET, see
 * build-server.mjs), the same compiler builds it in the run's one build process, which
 * parses the declaration files all apps share once.
 */
export async function buildApp(dir: string, tsconfig = 'tsconfig.json'): Promise<void> {
  const started = Date.now();
  const socket = process.env.DOCS_BUILD_SOCKET;
  const served = socket && !freshInstall ? await serveBuild(socket, dir, tsconfig) : undefined;
  if (served && !served.ok && !served.unsupported) {
    throw new Error(`tsc -p ${tsconfig} (in ${dir}, by the test run's build process) failed:\n${served.output}`);
  }
  if (!served?.ok) await run(process.execPath, [join(packagePath(dir, 'typescript'), 'bin', 'tsc'), '-p', tsconfig], dir);
  record({ app: relative(FRESH_DIR ?? root, dir), build: (Date.now() - started) / 1000 });
}

/** What the build process answers (build-server.mjs). */
export interface ServedBuild {
  /** tsc would have exited 0. */
  ok: boolean;
  /** A build it leaves to tsc (an incremental one). */
  unsupported?: boolean;
  /** tsc's diagnostics, as it prints them. */
  output: string;
}

/** Asks the build process at `socket` to build `dir`; undefined when it cannot be reached (the caller runs tsc). */
export function serveBuild(socket: string, dir: string, tsconfig = 'tsconfig.json'): Promise<ServedBuild | undefined> {
  return new Promise((resolve) => {
    const connection = createConnection(socket);
    let answer = '';
    connection.setEncoding('utf8');
    connection.on('connect', () => connection.write(JSON.stringify({ dir, tsconfig }) + '\n'));
    connection.on('data', (chunk) => {
      answer += chunk;
      if (!answer.endsWith('\n')) return;
      connection.end();
      resolve(JSON.parse(answer));
    });
    connection.on('error', () => resolve(undefined));
    connection.on('close', () => resolve(undefined));
  });
}

export interface RunningApp {
  child: ChildProcess;
  output: () => string;
  /** Resolves to the exit code once the process has exited. */
  exited: Promise<number | null>;
}

const running: RunningApp[] = [];

/** `npm start` of the page: `node dist/main.js` (or another script) in the app's folder. */
export function startApp(dir: string, env: Record<string, string> = {}, script = 'dist/main.js'): RunningApp {
  const child = spawn(process.execPath, [script], { cwd: dir, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (chunk) => (output += chunk));
  child.stderr!.on('data', (chunk) => (output += chunk));
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const app = { child, output: () => output, exited };
  running.push(app);
  return app;
}

/** Starts an HTTP app on `env.PORT`, else a free port, and resolves once it answers. */
export async function startHttpApp(dir: string, env: Record<string, string> = {}): Promise<{ base: string; app: RunningApp }> {
  const port = env.PORT ? Number(env.PORT) : await freePort();
  const app = startApp(dir, { ...env, PORT: String(port) });
  const base = `http://127.0.0.1:${port}`;
  await waitFor(
    `the app in ${dir} to answer`,
    async () => {
      if (app.child.exitCode !== null) throw new Error(`the app exited (${app.child.exitCode}):\n${app.output()}`);
      return fetch(base).then(
        () => true,
        () => false,
      );
    },
    30_000,
  );
  return { base, app };
}

/**
 * Sends SIGTERM (the page's `enableShutdownHooks()` closes the app, then Nest re-raises
 * the signal) and resolves once the process has exited on its own; rejects when a handle
 * the page left open (a client nobody closes) keeps it alive past the deadline, or when
 * it exits with an error code.
 */
export async function stopApp(app: RunningApp, timeoutMs = 15_000): Promise<void> {
  if (app.child.exitCode === null && app.child.signalCode === null) app.child.kill('SIGTERM');
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<'alive'>((resolve) => (timer = setTimeout(() => resolve('alive'), timeoutMs)));
  const outcome = await Promise.race([app.exited, deadline]).finally(() => clearTimeout(timer));
  if (outcome === 'alive') {
    app.child.kill('SIGKILL');
    throw new Error(`the app did not exit within ${timeoutMs} ms of SIGTERM (a handle is left open):\n${app.output()}`);
  }
  const clean = app.child.exitCode === 0 || app.child.signalCode === 'SIGTERM';
  if (!clean) throw new Error(`the app exited with ${app.child.exitCode ?? app.child.signalCode} on SIGTERM:\n${app.output()}`);
}

/** Runs a script of the app to its end, e.g. `node dist/seed.js`, resolving to its output. */
export async function runApp(
  dir: string,
  script: string,
  env: Record<string, string> = {},
  timeoutMs = 60_000,
): Promise<{ code: number | null; output: string }> {
  const app = startApp(dir, env, script);
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<'alive'>((resolve) => (timer = setTimeout(() => resolve('alive'), timeoutMs)));
  const outcome = await Promise.race([app.exited, deadline]).finally(() => clearTimeout(timer));
  if (outcome === 'alive') {
    app.child.kill('SIGKILL');
    throw new Error(`node ${script} in ${dir} did not exit within ${timeoutMs} ms:\n${app.output()}`);
  }
  return { code: outcome, output: app.output() };
}

/** Kills what is still running and removes the apps' folders: call it in afterAll. */
export function cleanUpDocApps(): void {
  for (const app of running) if (app.child.exitCode === null && app.child.signalCode === null) app.child.kill('SIGKILL');
  running.length = 0;
  for (const dir of made.splice(0)) rmSync(dir, { recursive: true, force: true });
}

export interface JsonAnswer {
  status: number;
  replayed: string | null;
  headers: Headers;
  body: any;
}

/** A JSON request as curl in the page sends it; `key` becomes the Idempotency-Key header. */
export async function requestJson(
  base: string,
  method: string,
  path: string,
  options: { body?: unknown; key?: string; headers?: Record<string, string> } = {},
): Promise<JsonAnswer> {
  const response = await fetch(base + path, {
    method,
    headers: {
      ...(options.body === undefined ? {} : { 'content-type': 'application/json' }),
      ...(options.key ? { 'idempotency-key': options.key } : {}),
      ...options.headers,
    },
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  const text = await response.text();
  let body: unknown = text;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    // not JSON: keep the text
  }
  return { status: response.status, replayed: response.headers.get('idempotent-replayed'), headers: response.headers, body };
}

export { freePort, waitFor };
