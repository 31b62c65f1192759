import { fork, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { buildApp, freshInstall, installedPackage, packagePath, pageApps, run, serveBuild } from './support/doc-app.js';

/**
 * The test run's build process (support/build-server.mjs) stands in for each docs app's
 * `tsc -p tsconfig.json`: it must emit what tsc emits, byte for byte, and fail where tsc
 * fails, with tsc's diagnostics; buildApp() must take its answer, and fall back to tsc
 * when it cannot be reached.
 */
describe('the docs apps build process', () => {
  let server: ChildProcess;
  let socket: string;
  let home: string;
  const made: string[] = [];

  /** getting-started's app in a folder of its own beside the package, with `change` applied to its files. */
  function app(name: string, change: (files: Map<string, string>) => void = () => undefined): string {
    const files = new Map([...pageApps('getting-started').get('default')!].map(([path, { code }]) => [path, code]));
    change(files);
    const dir = join(home, `build-server-${name}-${process.pid}`);
    rmSync(dir, { recursive: true, force: true });
    made.push(dir);
    for (const [path, code] of files) {
      mkdirSync(dirname(join(dir, path)), { recursive: true });
      writeFileSync(join(dir, path), code);
    }
    return dir;
  }

  /** Every file under `dir`, by relative path, with its content. */
  function tree(dir: string): Record<string, string> {
    const files: Record<string, string> = {};
    const walk = (at: string) => {
      for (const name of readdirSync(at).sort()) {
        const path = join(at, name);
        if (statSync(path).isDirectory()) walk(path);
        else files[relative(dir, path)] = readFileSync(path, 'utf8');
      }
    };
    walk(dir);
    return files;
  }

  const tsc = (dir: string) => run(process.execPath, [join(packagePath(dir, 'typescript'), 'bin', 'tsc'), '-p', 'tsconfig.json'], dir);
  const broken = (files: Map<string, string>) =>
    files.set('src/main.ts', `${files.get('src/main.ts')}\nconst port: number = 'not a number';\nconsole.log(port);\n`);

  beforeAll(async () => {
    home = await installedPackage();
    socket = join(mkdtempSync(join(tmpdir(), 'docs-build-')), 'server.sock');
    server = fork(join(__dirname, 'support', 'build-server.mjs'), [socket], { stdio: 'inherit' });
    await new Promise((resolve, reject) => {
      server.once('message', resolve);
      server.once('exit', (code) => reject(new Error(`the build server exited (${code})`)));
    });
  }, 120_000);

  afterAll(() => {
    server?.kill();
    for (const dir of made) rmSync(dir, { recursive: true, force: true });
    delete process.env.DOCS_BUILD_SOCKET;
  });

  it("emits exactly what the app's tsc emits", async () => {
    const served = app('served');
    const compiled = app('tsc');
    expect(await serveBuild(socket, served)).toEqual({ ok: true, output: '' });
    await tsc(compiled);
    const emitted = tree(join(served, 'dist'));
    expect(Object.keys(emitted)).toEqual(expect.arrayContaining(['main.js', 'app.module.js']));
    expect(emitted).toEqual(tree(join(compiled, 'dist')));
  }, 120_000);

  it("fails where tsc fails, with tsc's diagnostic, and buildApp throws it", async () => {
    const dir = app('broken', broken);
    const answer = await serveBuild(socket, dir);
    expect(answer?.ok).toBe(false);
    expect(answer?.output).toMatch(/src\/main\.ts\(\d+,\d+\): error TS2322: Type 'string' is not assignable to type 'number'/);
    await expect(tsc(dir)).rejects.toThrow(/error TS2322/);

    process.env.DOCS_BUILD_SOCKET = socket;
    // On a fresh install (npm run test:docs:fresh) a page's build stays the user's own
    // `tsc`, installed by the page's install lines, even with a build process listening.
    const builtBy = freshInstall
      ? /bin\/tsc -p tsconfig.json \(in .*\) exited 2:\n.*error TS2322/
      : /by the test run's build process\) failed:\n.*error TS2322/;
    await expect(buildApp(dir)).rejects.toThrow(builtBy);
  }, 120_000);

  it('buildApp runs tsc itself when the build process cannot be reached', async () => {
    const dir = app('fallback');
    process.env.DOCS_BUILD_SOCKET = join(dirname(socket), 'nobody-listens.sock');
    await buildApp(dir);
    expect(readFileSync(join(dir, 'dist', 'main.js'), 'utf8')).toContain('NestFactory.create');
  }, 120_000);
});
