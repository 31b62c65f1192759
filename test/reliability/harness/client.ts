/**
 * The harness's HTTP client: keep-alive, a bounded timeout on every request (a
 * request that outlives it is recorded as `timeout`, a failure, never awaited
 * forever), and a record of every outcome for the invariant checker.
 */
import { Agent, request as httpRequest } from 'node:http';
import type { AppProcess } from './app-processes.js';

export type OutcomeStatus = number | 'timeout' | 'network';

export interface Outcome {
  readonly key: string;
  /** Name of the application process that was asked. */
  readonly app: string;
  readonly status: OutcomeStatus;
  readonly body: string;
  readonly replayed: boolean;
  /** Epoch ms. */
  readonly startedAt: number;
  readonly durationMs: number;
  /** Free label set by the scenario (e.g. `redis-down`), for reporting. */
  readonly phase: string;
  readonly errorCode?: string;
}

export interface WorkRequest {
  readonly key: string;
  readonly payload: unknown;
  /** Index into the client's application list. */
  readonly appIndex: number;
  readonly fail?: boolean;
  readonly delayMs?: number;
  /** Overrides the client timeout (hanging requests aimed at a process about to be killed). */
  readonly timeoutMs?: number;
}

export class HarnessClient {
  readonly outcomes: Outcome[] = [];
  /** Label stamped on every outcome from now on. */
  phase = 'load';
  private readonly agent = new Agent({ keepAlive: true, maxSockets: 64 });
  private readonly inFlightPerApp: number[];

  constructor(
    readonly apps: AppProcess[],
    /** Longest wait for one answer, ms. @default 5000 */
    readonly timeoutMs = 5_000,
  ) {
    this.inFlightPerApp = apps.map(() => 0);
  }

  inFlight(appIndex: number): number {
    return this.inFlightPerApp[appIndex];
  }

  async send(work: WorkRequest): Promise<Outcome> {
    const app = this.apps[work.appIndex];
    const body = JSON.stringify({ payload: work.payload });
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'content-length': String(Buffer.byteLength(body)),
      'idempotency-key': work.key,
    };
    if (work.fail) headers['x-fail'] = '1';
    if (work.delayMs) headers['x-delay-ms'] = String(work.delayMs);
    const startedAt = Date.now();
    const phase = this.phase;
    this.inFlightPerApp[work.appIndex]++;
    const result = await new Promise<Pick<Outcome, 'status' | 'body' | 'replayed' | 'errorCode'>>((resolve) => {
      let settled = false;
      const finish = (value: Pick<Outcome, 'status' | 'body' | 'replayed' | 'errorCode'>) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(value);
      };
      const req = httpRequest({ host: '127.0.0.1', port: app.port, path: '/work', method: 'POST', headers, agent: this.agent }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () =>
          finish({
            status: res.statusCode ?? 0,
            body: Buffer.concat(chunks).toString('utf8'),
            replayed: res.headers['idempotent-replayed'] === 'true',
          }),
        );
        res.on('error', (error: NodeJS.ErrnoException) =>
          finish({ status: 'network', body: '', replayed: false, errorCode: error.code ?? error.message }),
        );
      });
      const timer = setTimeout(() => {
        finish({ status: 'timeout', body: '', replayed: false });
        req.destroy();
      }, work.timeoutMs ?? this.timeoutMs);
      req.on('error', (error: NodeJS.ErrnoException) =>
        finish({ status: 'network', body: '', replayed: false, errorCode: error.code ?? error.message }),
      );
      req.end(body);
    });
    this.inFlightPerApp[work.appIndex]--;
    const outcome: Outcome = { key: work.key, app: app.name, startedAt, durationMs: Date.now() - startedAt, phase, ...result };
    this.outcomes.push(outcome);
    return outcome;
  }

  close(): void {
    this.agent.destroy();
  }
}

export function isSuccess(status: OutcomeStatus): boolean {
  return typeof status === 'number' && status >= 200 && status < 300;
}
