import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { cpSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import * as ts from 'typescript';
import { buildPageApps, cleanUpDocApps, freshInstall, packagePath, requestJson, startHttpApp, stopApp } from './support/doc-app.js';

/**
 * docs/testing.md as a user meets it: the page's application (an ES module project: its
 * src/ and its three spec files, vitest.config.ts and tsconfig.spec.json) built from the
 * page's text, then the page's own test command, `npm test` (`tsc --noEmit -p
 * tsconfig.spec.json && vitest run`), run in the app's folder. The specs must pass; and to
 * show that they test something, the e2e spec must fail against a copy of the app whose
 * route lost its @Idempotent().
 *
 * Vitest is installed by the page's own install lines, in the fresh-install docs leg
 * (`npm run test:docs:fresh`); the repository does not install it, so on the repository's
 * install (`npm test`) the tests that run Vitest are skipped and the rest run.
 */
const withVitest = freshInstall ? it : it.skip;

/** A command's exit code and output, whatever the code (the page's specs are expected to fail once). */
function exec(command: string, args: string[], cwd: string): Promise<{ code: number | null; output: string }> {
  // The child is a test runner of its own: nothing of this Jest worker's environment must steer it.
  const env: NodeJS.ProcessEnv = { ...process.env, npm_config_update_notifier: 'false', NO_COLOR: '1' };
  delete env.JEST_WORKER_ID;
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('error', reject);
    child.on('exit', (code) => resolve({ code, output }));
  });
}

describe('docs/testing.md, built and tested as a user would', () => {
  let dir: string;
  const copies: string[] = [];

  beforeAll(async () => {
    dir = (await buildPageApps('testing', ['default'])).get('default')!;
  }, 300_000);

  afterAll(() => {
    cleanUpDocApps();
    for (const copy of copies) rmSync(copy, { recursive: true, force: true });
  });

  it('the application serves a refund and replays its retry, and exits after SIGTERM', async () => {
    const { base, app } = await startHttpApp(dir);
    const key = randomUUID();
    const first = await requestJson(base, 'POST', '/refunds', { key, body: { amount: 10 } });
    expect(first).toMatchObject({ status: 201, replayed: null, body: { refunded: 10 } });
    const retry = await requestJson(base, 'POST', '/refunds', { key, body: { amount: 10 } });
    expect(retry).toMatchObject({ status: 201, replayed: 'true', body: { refunded: 10 } });
    await stopApp(app);
  });

  withVitest(
    "npm test, the page's test command, type-checks the specs and runs them: they pass",
    async () => {
      expect(JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')).scripts.test).toBe(
        'tsc --noEmit -p tsconfig.spec.json && vitest run',
      );
      const { code, output } = await exec('npm', ['test'], dir);
      expect({ code, output }).toMatchObject({ code: 0 });
      expect(output).toMatch(/✓ test\/refunds\.controller\.spec\.ts/);
      expect(output).toMatch(/✓ test\/refunds\.e2e-spec\.ts/);
      expect(output).toMatch(/✓ test\/store-contract\.spec\.ts/);
      expect(output).toMatch(/Test Files {2}3 passed \(3\)/);
    },
    120_000,
  );

  it("the specs' type check covers the specs in test/ with Vitest's globals (the app's tsconfig.json does not)", () => {
    // Read as tsc reads them (extends, include), without compiling everything once more.
    const read = (config: string) => {
      const parsed = ts.getParsedCommandLineOfConfigFile(
        join(dir, config),
        {},
        { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} },
      );
      return { files: parsed!.fileNames.map((file) => relative(dir, file)).sort(), types: parsed!.options.types, errors: parsed!.errors };
    };
    const specs = ['test/refunds.controller.spec.ts', 'test/refunds.e2e-spec.ts', 'test/store-contract.spec.ts'];
    expect(read('tsconfig.spec.json')).toMatchObject({
      files: expect.arrayContaining([...specs, 'src/refunds.controller.ts']),
      types: ['node', 'vitest/globals'],
      errors: [],
    });
    expect(read('tsconfig.json').files.filter((file) => file.startsWith('test/'))).toEqual([]);
  });

  withVitest(
    'the e2e spec fails against the same route without @Idempotent()',
    async () => {
      const copy = `${dir}-undecorated`;
      copies.push(copy);
      cpSync(dir, copy, { recursive: true });
      const controller = join(copy, 'src', 'refunds.controller.ts');
      const source = readFileSync(controller, 'utf8');
      expect(source).toMatch(/^\s*@Idempotent\(\)\n/m);
      writeFileSync(controller, source.replace(/^\s*@Idempotent\(\)\n/m, ''));
      const { code, output } = await exec(
        process.execPath,
        [join(packagePath(copy, 'vitest'), 'vitest.mjs'), 'run', 'test/refunds.e2e-spec.ts'],
        copy,
      );
      expect(code).not.toBe(0);
      expect(output).toMatch(
        /FAIL {2}test\/refunds\.e2e-spec\.ts > POST \/refunds > refunds once for concurrent duplicates and replays the answer afterwards/,
      );
      expect(output).toMatch(/FAIL {2}test\/refunds\.e2e-spec\.ts > POST \/refunds > refuses the same key with another payload/);
    },
    120_000,
  );
});
