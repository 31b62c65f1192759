/**
 * The plumbing the benchmarks share: the app under load in a child process asked over
 * IPC (bench/run.ts, bench/peers/run.ts, bench/profile-diff.ts), what a run records of
 * its machine, its JSON and report files, the tables it writes between markers of
 * docs/performance.md, the clean-up of its Redis keys, and how a script ends.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { dirname, join, resolve } from 'node:path';

export const ROOT = resolve(__dirname, '..');
export const TS_REQUIRE = join(ROOT, 'test', 'support', 'ts-require.js');
export const PERFORMANCE_DOC = join(ROOT, 'docs', 'performance.md');

/**
 * Forks a TypeScript entry point (`-r ts-require`) with an IPC channel and waits for its
 * first message: `{ type: 'ready', ... }`, or anything else as the reason it failed.
 */
export function forkReady<Ready extends { type: 'ready' }>(
  file: string,
  { name, env, execArgv = [] }: { name: string; env: NodeJS.ProcessEnv; execArgv?: string[] },
): Promise<{ child: ChildProcess; ready: Ready }> {
  const child = fork(file, [], {
    execArgv: [...execArgv, '-r', TS_REQUIRE],
    env,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  return new Promise((resolvePromise, reject) => {
    const onExit = (code: number | null) => reject(new Error(`${name} exited with code ${code} before it was ready`));
    child.once('exit', onExit);
    child.once('message', (message: { type: string; error?: string }) => {
      child.off('exit', onExit);
      if (message.type === 'ready') resolvePromise({ child, ready: message as Ready });
      else {
        child.kill('SIGKILL');
        reject(new Error(`${name} failed to start: ${'error' in message ? message.error : JSON.stringify(message)}`));
      }
    });
  });
}

/** A forked process that answers requests over IPC: each request carries an id, and its answer the same id. */
export class IpcChild<Answer extends object> {
  private nextId = 1;
  private readonly waiting = new Map<number, (message: Answer) => void>();

  constructor(private readonly child: ChildProcess) {
    child.on('message', (message: Answer) => {
      if ('id' in message) {
        const id = message.id as number;
        this.waiting.get(id)?.(message);
        this.waiting.delete(id);
      }
    });
  }

  ask<T extends Answer>(message: object): Promise<T> {
    const id = this.nextId++;
    return new Promise((resolvePromise) => {
      this.waiting.set(id, resolvePromise as (message: Answer) => void);
      this.child.send({ ...message, id });
    });
  }

  /** Asks the process to close, and kills it when it has not exited 10 s later. */
  async close(): Promise<void> {
    const exited = new Promise((r) => this.child.once('exit', r));
    const timer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    await this.ask({ type: 'close' }).catch(() => undefined);
    await exited;
    clearTimeout(timer);
  }
}

/**
 * The child side of `forkReady` and `IpcChild`: starts, says `ready` (or `failed`, with
 * the reason), answers each request with its id, and on `close` closes and exits.
 */
export function serveParent<Request extends { id: number; type: string }>(
  start: () => Promise<{ ready: object; answer(request: Request): Promise<object>; close(): Promise<void> }>,
): void {
  const send = (message: object) => process.send!(message);
  // The parent died (Ctrl-C, a crash): do not stay behind holding a port and store connections.
  process.once('disconnect', () => process.exit(0));
  start().then(
    ({ ready, answer, close }) => {
      process.on('message', (request: Request) => {
        const reply: Promise<object> = request.type === 'close' ? close().then(() => ({ type: 'closed' })) : answer(request);
        void reply.then((message) => {
          send({ ...message, id: request.id });
          if (request.type === 'close') process.exit(0);
        });
      });
      send({ type: 'ready', ...ready });
    },
    (error: unknown) => {
      send({ type: 'failed', error: error instanceof Error ? (error.stack ?? error.message) : String(error) });
      process.exit(1);
    },
  );
}

/** Puts `text` between the two markers of docs/performance.md; false (and the page untouched) when it has no such markers. */
export function replaceBetweenMarkers(start: string, end: string, text: string, file = PERFORMANCE_DOC): boolean {
  if (!existsSync(file)) return false;
  const doc = readFileSync(file, 'utf8');
  const from = doc.indexOf(start);
  const to = doc.indexOf(end);
  if (from < 0 || to < from) return false;
  writeFileSync(file, doc.slice(0, from + start.length) + '\n' + text.trim() + '\n' + doc.slice(to));
  return true;
}

/** Removes the bench's records from the shared Redis. */
export async function deleteByPrefix(client: import('ioredis').Redis, prefix: string): Promise<void> {
  let cursor = '0';
  do {
    const [next, keys] = await client.scan(cursor, 'MATCH', `${prefix}*`, 'COUNT', 1000);
    cursor = next;
    if (keys.length) await client.unlink(...keys);
  } while (cursor !== '0');
}

/** The machine a run measured on, as its JSON records it. */
export function machineInfo(): { node: string; cpus: number; cpuModel: string; loadAverageAtStart: number[] } {
  return { node: process.version, cpus: cpus().length, cpuModel: cpus()[0]?.model.trim() ?? 'unknown', loadAverageAtStart: loadavg() };
}

/** Writes a run's JSON (none: keep the saved one) to `out` and its markdown report beside it (`.json` → `.md`). */
export function writeRun(out: string, result: object | undefined, report: string): void {
  mkdirSync(dirname(out), { recursive: true });
  if (result) writeFileSync(out, JSON.stringify(result, null, 2) + '\n');
  writeFileSync(out.replace(/\.json$/, '') + '.md', report);
}

/** Runs a script's `main` and exits: 0 once it resolved (a store client left open must not keep the process), 1 on its error. */
export function runMain(main: () => Promise<unknown>, log: (line: string) => void = (line) => process.stderr.write(line + '\n')): void {
  main().then(
    () => process.exit(0),
    (error: unknown) => {
      log(error instanceof Error ? (error.stack ?? error.message) : String(error));
      process.exit(1);
    },
  );
}
