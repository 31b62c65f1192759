/**
 * Disposable redis-server processes for tests that must kill, restart or cluster a
 * Redis of their own (the shared one on 6379 is never touched). Every process is
 * started on free ports, stopped by PID, and killed on process exit as a last resort.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const live = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

/** True when nothing listens on `port` (127.0.0.1) and it can be bound. */
export function isPortFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/** A free TCP port; with `alsoFreeOffset`, one whose `port + alsoFreeOffset` is free too (cluster bus ports). */
export async function freePort(alsoFreeOffset?: number): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = 20_000 + Math.floor(Math.random() * 30_000);
    if (!(await isPortFree(port))) continue;
    if (alsoFreeOffset !== undefined && !(await isPortFree(port + alsoFreeOffset))) continue;
    return port;
  }
  throw new Error('No free port found');
}

/** Sends one inline command over a raw socket and returns the raw reply (no client library). */
export function rawCommand(port: number, command: string, timeout = 1_000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ port, host: '127.0.0.1' });
    let reply = '';
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`no reply from 127.0.0.1:${port} to ${command}`));
    }, timeout);
    socket.once('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    socket.on('data', (chunk) => {
      reply += chunk.toString('utf8');
      if (reply.endsWith('\r\n')) {
        clearTimeout(timer);
        socket.end();
        resolve(reply);
      }
    });
    socket.write(command + '\r\n');
  });
}

async function waitForPong(port: number, child: ChildProcess, output: () => string, timeout = 10_000): Promise<void> {
  const deadline = Date.now() + timeout;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`redis-server on port ${port} exited: ${output()}`);
    }
    try {
      // The PID check makes sure the answer is ours, not another test's server that won the port.
      if (
        (await rawCommand(port, 'PING', 500)).startsWith('+PONG') &&
        (await rawCommand(port, 'INFO server', 500)).includes(`process_id:${child.pid}\r\n`)
      ) {
        return;
      }
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`redis-server on port ${port} did not answer PING: ${output()}`);
    await sleep(25);
  }
}

function spawnRedis(args: string[]): { child: ChildProcess; output: () => string } {
  const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString('utf8')).slice(-4_000);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  live.add(child);
  child.once('exit', () => live.delete(child));
  return { child, output: () => output };
}

async function killAndWait(child: ChildProcess, signal: NodeJS.Signals): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  process.kill(child.pid!, signal);
  await exited;
}

export interface RedisServerHandle {
  readonly port: number;
  /** PID of the current process (changes after `restart`). */
  readonly pid: number;
  /** Kills the server (SIGKILL by default: a crash, not a shutdown) and waits for it to exit. */
  kill(signal?: NodeJS.Signals): Promise<void>;
  /** Sends a signal without waiting, e.g. SIGSTOP / SIGCONT to freeze a server with its sockets open. */
  signal(signal: NodeJS.Signals): void;
  /** Starts a fresh, empty server on the same port (kills the current one first if alive). */
  restart(): Promise<void>;
  /** Kills the server and removes its directory. Safe to call twice. */
  stop(): Promise<void>;
}

/**
 * Starts a throwaway, non-persistent redis-server on a free port (or `port`) and waits
 * until it answers PING. Without `port`, a port lost to a concurrent test is retried.
 */
export async function startRedisServer(options: { port?: number; args?: string[] } = {}): Promise<RedisServerHandle> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startRedisServerOn(options.port ?? (await freePort()), options.args ?? []);
    } catch (error) {
      if (options.port !== undefined || attempt >= 3) throw error;
    }
  }
}

async function startRedisServerOn(port: number, extraArgs: string[]): Promise<RedisServerHandle> {
  const dir = mkdtempSync(join(tmpdir(), `redis-${port}-`));
  const args = [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--dir',
    dir,
    '--save',
    '',
    '--appendonly',
    'no',
    '--daemonize',
    'no',
    ...extraArgs,
  ];
  let current = spawnRedis(args);
  try {
    await waitForPong(port, current.child, current.output);
  } catch (error) {
    await killAndWait(current.child, 'SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    port,
    get pid() {
      return current.child.pid!;
    },
    kill: (signal = 'SIGKILL') => killAndWait(current.child, signal),
    signal: (signal) => void process.kill(current.child.pid!, signal),
    async restart() {
      await killAndWait(current.child, 'SIGKILL');
      current = spawnRedis(args);
      await waitForPong(port, current.child, current.output);
    },
    async stop() {
      await killAndWait(current.child, 'SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export interface RedisClusterHandle {
  /** Seed nodes for `new Cluster(nodes)`. */
  readonly nodes: { host: string; port: number }[];
  readonly pids: number[];
  /** Kills every node by PID and removes their directory. */
  stop(): Promise<void>;
}

/**
 * A real Redis Cluster of `masters` masters and no replicas on free ports, ready when
 * every node reports `cluster_state:ok`.
 */
export async function startRedisCluster(options: { masters?: number } = {}): Promise<RedisClusterHandle> {
  const masters = options.masters ?? 3;
  const dir = mkdtempSync(join(tmpdir(), 'redis-cluster-'));
  const started: { child: ChildProcess; port: number }[] = [];
  const stop = async () => {
    await Promise.all(started.map(({ child }) => killAndWait(child, 'SIGKILL')));
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const ports: number[] = [];
    while (ports.length < masters) {
      // The cluster bus listens on port + 10000.
      const port = await freePort(10_000);
      if (!ports.includes(port)) ports.push(port);
    }
    for (const port of ports) {
      const { child, output } = spawnRedis([
        '--port',
        String(port),
        '--bind',
        '127.0.0.1',
        '--dir',
        dir,
        '--cluster-enabled',
        'yes',
        '--cluster-config-file',
        join(dir, `nodes-${port}.conf`),
        '--save',
        '',
        '--appendonly',
        'no',
        '--daemonize',
        'no',
      ]);
      started.push({ child, port });
      await waitForPong(port, child, output);
    }
    await run('redis-cli', [
      '--cluster',
      'create',
      ...ports.map((port) => `127.0.0.1:${port}`),
      '--cluster-replicas',
      '0',
      '--cluster-yes',
    ]);
    const deadline = Date.now() + 20_000;
    for (const port of ports) {
      for (;;) {
        const { stdout } = await run('redis-cli', ['-p', String(port), 'cluster', 'info']);
        if (stdout.includes('cluster_state:ok')) break;
        if (Date.now() > deadline) throw new Error(`cluster node ${port} never reached cluster_state:ok:\n${stdout}`);
        await sleep(50);
      }
    }
    return { nodes: ports.map((port) => ({ host: '127.0.0.1', port })), pids: started.map(({ child }) => child.pid!), stop };
  } catch (error) {
    await stop();
    throw error;
  }
}
