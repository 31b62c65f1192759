import { spawnSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

// The docs checker is what keeps every ```ts snippet honest, so it is tested like code:
// it must fail on a snippet with a type error, point at the markdown line, and skip nocheck blocks.
const root = resolve(__dirname, '..', '..');
const dir = join(root, '.tmp', `docs-check-spec-${process.pid}-${Date.now()}`);

function checkDocs(...files: string[]) {
  const run = spawnSync(process.execPath, [join(root, 'scripts', 'check-docs.mjs'), ...files], { cwd: root, encoding: 'utf8' });
  return { status: run.status, output: run.stdout + run.stderr };
}

describe('scripts/check-docs.mjs', () => {
  beforeAll(() => mkdirSync(dir, { recursive: true }));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('fails on a snippet with a type error and reports its markdown line', () => {
    const md = join(dir, 'broken.md');
    writeFileSync(
      md,
      ['# Broken', '', '```ts', "import { Idempotent } from 'nestjs-idempotency';", "Idempotent({ ttl: 'one day' });", '```', ''].join(
        '\n',
      ),
    );
    const { status, output } = checkDocs(md);
    expect(status).not.toBe(0);
    expect(output).toMatch(/broken\.md:5:\d+ error TS\d+/);
  });

  it('passes valid snippets, resolves every entry point, and skips ```ts nocheck blocks', () => {
    const md = join(dir, 'fine.md');
    writeFileSync(
      md,
      [
        '```ts',
        "import { Idempotent, MemoryIdempotencyStore } from 'nestjs-idempotency';",
        "import { IdempotencyTestingModule } from 'nestjs-idempotency/testing';",
        "import { RedisIdempotencyStore } from 'nestjs-idempotency/redis';",
        'Idempotent({ ttl: 60_000, store: new MemoryIdempotencyStore() });',
        'void IdempotencyTestingModule.forRoot();',
        'void RedisIdempotencyStore;',
        '```',
        '',
        '```ts nocheck',
        "const notChecked: number = 'this would not compile';",
        '```',
        '',
      ].join('\n'),
    );
    const { status, output } = checkDocs(md);
    expect(output).toContain('1 snippet(s)');
    expect(output).toContain('1 marked nocheck');
    expect(status).toBe(0);
  });

  it("checks the files of a page's app together, and reports an error in one at its markdown line", () => {
    const md = join(dir, 'app.md');
    const page = (controller: string) =>
      [
        '```ts file=src/main.ts',
        "import { PaymentsController } from './payments.controller.js';",
        'export const controllers = [PaymentsController];',
        '```',
        '',
        '```ts file=src/payments.controller.ts',
        controller,
        '```',
        '',
      ].join('\n');
    writeFileSync(md, page('export class PaymentsController {}'));
    const fine = checkDocs(md);
    expect(fine.output).toContain('2 snippet(s)');
    expect(fine.status).toBe(0);
    writeFileSync(md, page("export class PaymentsController { readonly n: number = 'one'; }"));
    const broken = checkDocs(md);
    expect(broken.status).not.toBe(0);
    expect(broken.output).toMatch(/app\.md:7:\d+ error TS2322/);
  });

  it('fails on a link to a file the npm package does not ship, or to a heading that does not exist', () => {
    const md = join(root, 'docs', `.links-spec-${process.pid}.md`);
    try {
      writeFileSync(md, '# Links\n\n[fine](getting-started.md#1-install) [here](#links)\n');
      expect(checkDocs(md).status).toBe(0);
      writeFileSync(md, '# Links\n\n[app](../sample-app/README.md) [gone](getting-started.md#no-such-step)\n');
      const { status, output } = checkDocs(md);
      expect(status).not.toBe(0);
      expect(output).toContain('../sample-app/README.md: not in the npm package');
      expect(output).toContain('getting-started.md#no-such-step: no heading #no-such-step');
    } finally {
      rmSync(md, { force: true });
    }
  });
});
