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
      [
        '# Broken',
        '',
        '```ts',
        "import { Idempotent } from 'nestjs-idempotency';",
        "Idempotent({ ttl: 'one day' });",
        '```',
        '',
      ].join('\n'),
    );
    const { status, output } = checkDocs(md);
    expect(status).not.toBe(0);
    expect(output).toMatch(/broken\.md:5:\d+ error TS2322/);
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
});
