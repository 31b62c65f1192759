/**
 * The plumbing the benchmarks share: the app under load in a child process asked over
 * IPC (bench/run.ts, bench/peers/run.ts, bench/profile-diff.ts), the tables a run writes
 * between markers of docs/performance.md, and the clean-up of a run's Redis keys.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

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
