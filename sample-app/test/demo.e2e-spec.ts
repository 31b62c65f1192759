import { spawn } from 'node:child_process';
import { resolve } from 'node:path';

// `npm run demo` is the project's headline claim, so the test command runs it: it must
// exit 0 on a machine with no service running, and print zero duplicated side effects.
const root = resolve(__dirname, '..', '..');

function runDemo(): Promise<{ code: number | null; output: string }> {
  return new Promise((done) => {
    // The demo forces the embedded defaults for its app (no REDIS_URL / DATABASE_URL).
    const child = spawn(process.execPath, ['scripts/demo.mjs'], { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => (output += chunk));
    child.stderr.on('data', (chunk) => (output += chunk));
    child.on('exit', (code) => done({ code, output }));
  });
}

describe('npm run demo', () => {
  it('survives the storm, including a SIGKILL mid-request and one between two steps, with every side effect exactly once', async () => {
    const { code, output } = await runDemo();
    expect(output).toMatch(/side effects executed twice: 0 \| refunds missing: 0/);
    expect(output).toContain('crash: SIGKILL mid-refund, restart, retry');
    // POST /refunds killed between its provider step and its ledger step: each effect once.
    expect(output).toMatch(/ok {3}\d+\. crash: SIGKILL between two steps, restart, retry/);
    expect(output).toMatch(/after the retry .*: 1 provider refund \(1 call to the provider\), 1 ledger entry, 1 e-mail; 1 step replayed, 2 run; 3 duplicates replayed/);
    expect(output).toMatch(/^\| TOTAL .*\|/m);
    expect(code).toBe(0);
  }, 180_000);
});
