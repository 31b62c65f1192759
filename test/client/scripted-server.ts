import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** One request as the scripted server saw it. */
export interface SeenRequest {
  method: string;
  path: string;
  key: string | undefined;
  body: string;
  contentType: string | undefined;
  at: number;
}

/** What the server does with the n-th request to a path: answer, or break the connection. */
export type Script = (request: SeenRequest, index: number, response: ServerResponse) => void;

/** A status with headers and a body. */
export const answer =
  (status: number, headers: Record<string, string> = {}, body = `{"status":${status}}`): Script =>
  (_request, _index, response) => {
    response.writeHead(status, { 'content-type': 'application/json', ...headers });
    response.end(body);
  };

/** Destroys the socket without an answer: a network error for the client. */
export const hangUp: Script = (_request, _index, response) => response.socket?.destroy();

/** Never answers (until the server closes): a timeout for the client. */
export const stall: Script = () => undefined;

/**
 * A plain HTTP server whose answers the test scripts per path, attempt by attempt (the
 * last script repeats), and which records every request it gets.
 */
export class ScriptedServer {
  readonly seen: SeenRequest[] = [];
  private readonly scripts = new Map<string, Script[]>();
  private server: Server | undefined;
  base = '';

  script(path: string, ...steps: Script[]): string {
    this.scripts.set(path, steps);
    return this.base + path;
  }

  requestsTo(path: string): SeenRequest[] {
    return this.seen.filter((request) => request.path === path);
  }

  async start(): Promise<void> {
    this.server = createServer((request: IncomingMessage, response: ServerResponse) => {
      let body = '';
      request.setEncoding('utf8');
      request.on('data', (chunk) => (body += chunk));
      request.on('end', () => {
        const path = request.url ?? '/';
        const seen: SeenRequest = {
          method: request.method ?? 'GET',
          path,
          key: request.headers['idempotency-key'] as string | undefined,
          body,
          contentType: request.headers['content-type'],
          at: Date.now(),
        };
        const index = this.requestsTo(path).length;
        this.seen.push(seen);
        const steps = this.scripts.get(path) ?? [answer(404)];
        steps[Math.min(index, steps.length - 1)](seen, index, response);
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.base = `http://127.0.0.1:${(this.server!.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }
}
