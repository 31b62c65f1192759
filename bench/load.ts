/**
 * The load side the HTTP benchmarks share (bench/run.ts, bench/peers/run.ts,
 * bench/profile-diff.ts): autocannon against an app in a child process, reduced to
 * req/s and latencies at hrtime resolution, and the bench app (bench/app.ts) asked for its
 * store calls and CPU over IPC.
 */
import autocannon from 'autocannon';
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { AppConfig, ChildMessage, ParentMessage } from './app.js';
import type { FloorName } from './floors.js';
import { forkReady, IpcChild } from './harness.js';
import { percentile } from './stats.js';
import type { StoreName } from './stores.js';

export const BODY = JSON.stringify({ amount: 4200, currency: 'eur', customer: 'cus_123', description: 'bench order' });

/** One autocannon run, reduced to what the report needs. */
export interface RunSample {
  rps: number;
  p50: number;
  p99: number;
  requests: number;
  non2xx: number;
  errors: number;
  /** CPU time of the app process per request sent, µs (user + system). */
  cpuMicrosPerRequest?: number;
  storeCalls?: number;
  backendCalls?: number;
  /** Redis: EVAL/EVALSHA calls the server executed meanwhile (INFO commandstats; shared server, so an upper bound). */
  serverCommands?: number;
}

export interface Target {
  path: string;
  /** 'unique' gives every request a new key; otherwise the fixed key sent with each request. */
  key: 'unique' | string | undefined;
  duration: number;
}

export interface CannonResult {
  result: autocannon.Result;
  /** Every response time, ms at hrtime resolution (autocannon's histogram keeps whole ms and 2xx only). */
  latencies: Float64Array;
}

export function cannon(port: number, target: Target, connections: number): Promise<CannonResult> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  const unique = target.key === 'unique';
  if (target.key && !unique) headers['idempotency-key'] = target.key;
  const prefix = randomBytes(6).toString('hex');
  let n = 0;
  let latencies = new Float64Array(65_536);
  let count = 0;
  // A new key per request: every request is a first execution.
  const setupRequest = (request: autocannon.Request) => ({ ...request, headers: { ...headers, 'idempotency-key': `${prefix}-${++n}` } });
  return new Promise((resolvePromise, reject) => {
    const instance = autocannon(
      {
        url: `http://127.0.0.1:${port}`,
        connections,
        duration: target.duration,
        requests: [{ method: 'POST', path: target.path, headers, body: BODY, ...(unique ? { setupRequest } : {}) }],
      },
      (error, result) => (error ? reject(error) : resolvePromise({ result, latencies: latencies.subarray(0, count) })),
    );
    instance.on('response', (_client: unknown, _status: number, _bytes: number, responseTime: number) => {
      if (count === latencies.length) {
        const grown = new Float64Array(latencies.length * 2);
        grown.set(latencies);
        latencies = grown;
      }
      latencies[count++] = responseTime;
    });
  });
}

/** Stores the one result a replay run replays, so that the timed run is all replays. */
export async function storeReplayed(port: number, path: string, key: string): Promise<void> {
  const stored = await fetch(`http://127.0.0.1:${port}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: BODY,
  });
  if (stored.status !== 201) throw new Error(`${path} answered ${stored.status} to the request that stores the replayed key`);
}

export function sampleOf({ result, latencies }: CannonResult): RunSample {
  return {
    rps: result.requests.total / result.duration,
    p50: percentile(latencies, 50),
    p99: percentile(latencies, 99),
    // The requests still in the server when autocannon stops were sent and are served: they count.
    requests: result.requests.sent,
    non2xx: result.non2xx,
    errors: result.errors,
  };
}

type Counts = Extract<ChildMessage, { type: 'counts' }>;

/** The app under load (bench/app.ts), in its own process, with a request/response channel over IPC. */
export class AppProcess extends IpcChild<ChildMessage> {
  private constructor(
    child: ChildProcess,
    readonly port: number,
    readonly stores: StoreName[],
    readonly floors: FloorName[],
  ) {
    super(child);
  }

  static async start(config: AppConfig, cpuProfileDir?: string): Promise<AppProcess> {
    const { child, ready } = await forkReady<Extract<ChildMessage, { type: 'ready' }>>(join(__dirname, 'app.ts'), {
      name: 'bench app',
      execArgv: cpuProfileDir ? ['--cpu-prof', '--cpu-prof-dir', cpuProfileDir] : [],
      env: { ...process.env, BENCH_APP_CONFIG: JSON.stringify(config) },
    });
    return new AppProcess(child, ready.port, ready.stores, ready.floors ?? []);
  }

  request<T extends ChildMessage>(
    message: ParentMessage extends infer M ? (M extends unknown ? Omit<M, 'id'> : never) : never,
  ): Promise<T> {
    return this.ask<T>(message);
  }

  counts(): Promise<Counts> {
    return this.request({ type: 'counts' });
  }

  /**
   * Store counts once the requests still in the server when autocannon stopped have
   * finished (they were sent, so they count): polled until two reads agree.
   */
  async settledCounts(): Promise<Counts> {
    let last = await this.counts();
    for (let i = 0; i < 40; i++) {
      await new Promise((r) => setTimeout(r, 50));
      const next = await this.counts();
      if (JSON.stringify(next.counts) === JSON.stringify(last.counts)) return next;
      last = next;
    }
    return last;
  }
}
