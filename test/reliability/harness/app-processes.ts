/**
 * Starts, kills and restarts the harness application (app.ts) as real child
 * processes, each on its own free port. Every process is stopped by its PID, and
 * killed on harness exit as a last resort.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { join, resolve } from 'node:path';

const REPO_ROOT = resolve(__dirname, '../../..');
const APP_ENTRY = join(__dirname, 'app.ts');
const TS_REQUIRE = join(REPO_ROOT, 'test/support/ts-require.js');

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/** Environment of one application process. */
export interface AppEnv {
  /** Where effect logs go (one append-only file per process). */
  HARNESS_EFFECT_DIR: string;
  /** `memory`, `redis` or `typeorm`. @default 'memory' */
  HARNESS_STORE?: string;
  /** Lease of the `/work` handler, ms. @default 2000 */
  HARNESS_LEASE_TTL?: string;
  HARNESS_REDIS_PORT?: string;
  /** Redis key prefix / table name suffix of this run. */
  HARNESS_PREFIX?: string;
  /** PostgreSQL `application_name`, so the harness can terminate exactly these connections. */
  HARNESS_PG_APP_NAME?: string;
  HARNESS_PG_SCHEMA?: string;
  /** `1`: the handler is `@Idempotent({ transactional: true })` and its effect is a row written in that transaction. */
  HARNESS_TRANSACTIONAL?: string;
  /** `1`: the Redis store runs with its near cache on. */
  HARNESS_NEAR_CACHE?: string;
  [name: string]: string | undefined;
}

export class AppProcess {
  private child: ChildProcess | undefined;
  private stderr = '';
  port = 0;
  /** Exits the harness did not ask for (a crash of the application itself), with the process's last stderr. */
  readonly crashes: string[] = [];
  private expectingExit = false;
  /** How many times this slot was (re)started. */
  generation = 0;

  constructor(
    readonly name: string,
    private readonly env: AppEnv,
  ) {}

  /** The last 4 000 characters the process wrote to stderr. */
  get stderrTail(): string {
    return this.stderr;
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get alive(): boolean {
    return !!this.child && this.child.exitCode === null && this.child.signalCode === null;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** Spawns the process and resolves once it printed `READY <port>`. */
  async start(timeoutMs = 30_000): Promise<void> {
    this.generation++;
    this.stderr = '';
    const child = spawn(process.execPath, ['-r', TS_REQUIRE, APP_ENTRY], {
      cwd: REPO_ROOT,
      env: { ...process.env, ...this.env, HARNESS_APP_NAME: this.name },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    this.child = child;
    live.add(child);
    child.once('exit', (code, signal) => {
      live.delete(child);
      if (!this.expectingExit) this.crashes.push(`${this.name} (pid ${child.pid}) exited by itself (${code ?? signal}): ${this.stderr}`);
    });
    this.expectingExit = false;
    child.stderr!.on('data', (chunk: Buffer) => (this.stderr = (this.stderr + chunk.toString('utf8')).slice(-4_000)));
    this.port = await new Promise<number>((resolvePort, reject) => {
      let out = '';
      const timer = setTimeout(() => reject(new Error(`${this.name} did not start within ${timeoutMs} ms: ${this.stderr}`)), timeoutMs);
      child.stdout!.on('data', (chunk: Buffer) => {
        out += chunk.toString('utf8');
        const match = /READY (\d+)/.exec(out);
        if (match) {
          clearTimeout(timer);
          resolvePort(Number(match[1]));
        }
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`${this.name} exited (${code ?? signal}) before it was ready: ${this.stderr}`));
      });
    });
  }

  /** SIGKILL: a crash, not a shutdown. Resolves once the process is gone. */
  async kill(signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((done) => child.once('exit', () => done()));
    this.expectingExit = true;
    process.kill(child.pid!, signal);
    await exited;
  }

  async restart(): Promise<void> {
    await this.kill();
    await this.start();
  }

  /** Graceful stop (SIGTERM), then SIGKILL if it lingers. */
  async stop(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((done) => child.once('exit', () => done()));
    this.expectingExit = true;
    process.kill(child.pid!, 'SIGTERM');
    const timer = setTimeout(() => child.exitCode === null && child.signalCode === null && process.kill(child.pid!, 'SIGKILL'), 3_000);
    await exited;
    clearTimeout(timer);
  }
}

/** Starts `count` application processes in parallel. */
export async function startApps(count: number, env: AppEnv): Promise<AppProcess[]> {
  const apps = Array.from({ length: count }, (_, i) => new AppProcess(`app${i}`, env));
  try {
    await Promise.all(apps.map((app) => app.start()));
  } catch (error) {
    await stopApps(apps);
    throw error;
  }
  return apps;
}

export async function stopApps(apps: AppProcess[]): Promise<void> {
  await Promise.all(apps.map((app) => app.stop()));
}
