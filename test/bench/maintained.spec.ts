import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { parseArgs as parsePeersArgs, peersReport, type PeersResult } from '../../bench/peers/run.js';
import type { ScaleReport } from '../../bench/scale-report.js';

// Each benchmark behind `npm run bench:*` still runs, through its npm script, on the
// smallest sizes it takes (the HTTP harness of `npm run bench` is bench.spec.ts). No
// timing is asserted: only that it ran, and that what it wrote has its shape. The saved
// runs of bench/results/ are also checked against what docs/performance.md shows.
const ROOT = resolve(__dirname, '..', '..');
const run = promisify(execFile);
let dir: string;

beforeAll(() => (dir = mkdtempSync(join(tmpdir(), 'bench-smoke-'))));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** `npm run <script> -- <args>`: its standard output (its log goes to standard error). */
async function npmRun(script: string, args: string[]): Promise<string> {
  const { stdout } = await run('npm', ['run', '--silent', script, '--', ...args], {
    cwd: ROOT,
    maxBuffer: 16 * 1024 * 1024,
    env: { ...process.env, BENCH_LIB: '' },
  });
  return stdout;
}

const saved = <T>(file: string) => JSON.parse(readFileSync(join(ROOT, 'bench', 'results', file), 'utf8')) as T;
const performanceDoc = () => readFileSync(join(ROOT, 'docs', 'performance.md'), 'utf8');

describe('npm run bench:peers', () => {
  it('parses its flags and refuses unknown ones', () => {
    expect(parsePeersArgs(['--platform', 'both', '--stores', 'redis,redisNear', '--rounds=2', '--no-docs'])).toMatchObject({
      platforms: ['express', 'fastify'],
      stores: ['redis', 'redisNear'],
      rounds: 2,
      updateDocs: false,
    });
    expect(() => parsePeersArgs(['--stores', 'typeorm'])).toThrow(/--stores: unknown value typeorm/);
    expect(() => parsePeersArgs(['--bogus'])).toThrow(/Unknown option --bogus/);
  });

  it("renders docs/performance.md's table from the saved run (bench/results/peers.json)", async () => {
    const doc = performanceDoc();
    const start = '<!-- bench:peers:start -->';
    const shown = doc.slice(doc.indexOf(start) + start.length, doc.indexOf('<!-- bench:peers:end -->')).trim();
    expect(peersReport(saved<PeersResult>('peers.json'))).toBe(shown);
    expect((await npmRun('bench:peers', ['--report', 'bench/results/peers.json', '--no-docs'])).trim()).toBe(shown);
  });

  // It needs NestJS 11 and the peer installed (`bash .ci/legs/install.sh peers bench/.scratch/peers`).
  const peersDir = process.env.BENCH_PEERS_DIR ? resolve(process.env.BENCH_PEERS_DIR) : join(ROOT, 'bench', '.scratch', 'peers');
  (existsSync(join(peersDir, 'node_modules', '@node-idempotency', 'nestjs')) ? it : it.skip)(
    'runs one round of one store',
    async () => {
      const out = join(dir, 'peers.json');
      await npmRun('bench:peers', [
        '--platform',
        'fastify',
        '--stores',
        'memory',
        '--duration',
        '0.5',
        '--rounds',
        '1',
        '--connections',
        '2',
        '--out',
        out,
      ]);
      const result = JSON.parse(readFileSync(out, 'utf8')) as PeersResult;
      expect(result.results.map((r) => r.case)).toEqual(['first', 'replay']);
      expect(result.results[0].peer.rounds).toHaveLength(1);
    },
    120_000,
  );
});

describe('npm run bench:chart', () => {
  it('draws docs/images/bench-*.svg again from the saved runs, byte for byte', async () => {
    await npmRun('bench:chart', ['--results', 'bench/results', '--out', join(dir, 'images')]);
    const drawn = readdirSync(join(dir, 'images')).sort();
    expect(drawn).toEqual(['bench-peers.svg', 'bench-ratios.svg']);
    for (const file of drawn) {
      expect(readFileSync(join(dir, 'images', file), 'utf8')).toBe(readFileSync(join(ROOT, 'docs', 'images', file), 'utf8'));
    }
  });
});

describe('npm run bench:compare', () => {
  it('puts two sets of saved runs side by side', async () => {
    const latest = join(ROOT, 'bench', 'results', 'latest.json');
    const table = await npmRun('bench:compare', ['--before', latest, '--after', latest]);
    expect(table).toContain('| platform | case | store | req/s × bare, before → after |');
    expect(table).toMatch(/\| express \| first \| memory \| (\d\.\d\d) → \1 \|/);
  });
});

describe('npm run bench:loop', () => {
  it('times replays and first executions of a route method without HTTP', async () => {
    const out = await npmRun('bench:loop', ['--batch', '200', '--batches', '2']);
    expect(out).toMatch(/^replay: [\d.]+ µs per call \(best of 1 batches of 200\)$/m);
    expect(out).toMatch(/^first execution: [\d.]+ µs per call/m);
  }, 60_000);
});

describe('npm run bench:profile-diff', () => {
  it('profiles the memory store beside its floor, one short round each', async () => {
    const out = join(dir, 'diff.md');
    const stdout = await npmRun('bench:profile-diff', [
      ...['--platform', 'fastify', '--store', 'memory', '--case', 'first'],
      ...['--duration', '0.5', '--rounds', '1', '--connections', '2', '--top', '5', '--out', out],
    ]);
    rmSync(/profiles in (\S+)/.exec(stdout)![1], { recursive: true, force: true });
    const report = readFileSync(out, 'utf8');
    expect(report).toContain('# fastify, first: memory beside floor, function by function');
    expect(report).toMatch(/^\| lib \| [\d.]+ \| [\d.]+ \| -?[\d.]+ \|$/m);
  }, 120_000);
});

describe('npm run bench:scale', () => {
  it('fills, measures and purges each store at a tiny size', async () => {
    const out = join(dir, 'scale.json');
    await npmRun('bench:scale', [
      ...['--stores', 'postgres,mariadb,redis', '--sizes', '0,200', '--redis-sizes', '0,200', '--ops', '20', '--rounds', '1'],
      ...['--big-body-records', '50', '--purge-expired', '200', '--purge-live', '200', '--window-ms', '200', '--out', out],
    ]);
    const report = JSON.parse(readFileSync(out, 'utf8')) as ScaleReport;
    expect(report.stores.map((s) => s.store)).toEqual(['postgres', 'mariadb', 'redis']);
    for (const store of report.stores) expect(store.sizes.map((s) => s.size)).toEqual(expect.arrayContaining([0, 200]));
    expect(report.stores[0].purge?.deleted).toBe(200);
    expect(readFileSync(out.replace(/\.json$/, '.md'), 'utf8')).toContain('records / GiB');
  }, 180_000);
});

describe('npm run bench:outbox', () => {
  it('measures one staged message per execution on every store, with and without it', async () => {
    const out = await npmRun('bench:outbox', ['--calls', '10', '--rounds', '1']);
    const rows = out.split('\n').filter((line) => /^\| [^-]/.test(line) && !line.startsWith('| store'));
    expect(rows.map((row) => row.split(' | ')[0].slice(2))).toEqual([
      'memory, makeIdempotent',
      'Redis, makeIdempotent',
      'PostgreSQL, makeIdempotent on TypeOrmIdempotencyStore',
      'PostgreSQL, runIdempotentTransaction',
      'MariaDB, makeIdempotent on TypeOrmIdempotencyStore',
      'MariaDB, runIdempotentTransaction',
    ]);
    for (const row of rows) expect(row).toMatch(/\| [\d.]+ \| [\d.]+ \| [+-][\d.]+ \([+-]\d+ %\) \|$/);
  }, 120_000);
});
