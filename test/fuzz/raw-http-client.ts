/**
 * A keep-alive HTTP/1.1 client over a raw socket, for hostile-input tests: Node's own
 * client refuses to send control characters, CRLF or non-Latin-1 bytes in headers,
 * which is exactly what these tests must send. Requests go one at a time on one
 * connection; when the server closes it (as Node's parser does after a malformed
 * request), or a header line held a line break, the next request opens a new one.
 */
import { connect, type Socket } from 'node:net';

export interface RawResponse {
  readonly status: number;
  /** Lower-cased names; repeated headers joined with ', '. */
  readonly headers: Record<string, string>;
  readonly body: Buffer;
  /** The server closed the connection after this response. */
  readonly closed: boolean;
}

export interface RawRequest {
  readonly method?: string;
  readonly path: string;
  /** Header lines as raw bytes (name and value are written as given, UTF-8 encoded). */
  readonly headers?: ReadonlyArray<readonly [string, string | Buffer]>;
  readonly body?: string | Buffer;
}

export class RawHttpClient {
  private socket: Socket | undefined;
  private buffer = Buffer.alloc(0);
  private closed = true;
  private waiter: (() => void) | undefined;

  constructor(
    private readonly port: number,
    /** Longest wait for one response, ms. @default 10000 */
    private readonly timeoutMs = 10_000,
  ) {}

  async send(request: RawRequest): Promise<RawResponse> {
    const reused = !this.closed;
    try {
      return await this.sendOnce(request);
    } catch (error) {
      // The server may close an idle keep-alive connection (Fastify does after some
      // errors) just as the next request goes out; that request was never read, so it
      // is sent again once, on a fresh connection.
      if (reused && error instanceof ConnectionClosedError && error.bufferedBytes === 0) return this.sendOnce(request);
      throw error;
    }
  }

  private async sendOnce(request: RawRequest): Promise<RawResponse> {
    if (this.closed) await this.open();
    const body = typeof request.body === 'string' ? Buffer.from(request.body, 'utf8') : (request.body ?? Buffer.alloc(0));
    const lines: Buffer[] = [
      Buffer.from(`${request.method ?? 'POST'} ${request.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: ${body.length}\r\n`),
    ];
    for (const [name, value] of request.headers ?? []) {
      lines.push(Buffer.from(`${name}: `), typeof value === 'string' ? Buffer.from(value, 'utf8') : value, Buffer.from('\r\n'));
    }
    lines.push(Buffer.from('\r\n'), body);
    this.socket!.write(Buffer.concat(lines));
    // A line break inside a header line ends the request early for the server: the bytes
    // after it are read as another request, whose answer would come back as the next
    // request's. Such a request gets its connection to itself.
    const framed = (request.headers ?? []).every(([name, value]) => !/[\r\n]/.test(name + value.toString('latin1')));
    const deadline = Date.now() + this.timeoutMs;
    for (;;) {
      const response = this.tryParse(request.method === 'HEAD');
      if (response) {
        if (!framed) this.close();
        return response;
      }
      if (this.closed) throw new ConnectionClosedError(this.buffer.length);
      const remaining = deadline - Date.now();
      if (remaining <= 0) throw new Error(`no response within ${this.timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, remaining);
        this.waiter = () => {
          clearTimeout(timer);
          resolve();
        };
      });
    }
  }

  close(): void {
    this.socket?.destroy();
    this.closed = true;
  }

  private open(): Promise<void> {
    this.buffer = Buffer.alloc(0);
    return new Promise((resolve, reject) => {
      const socket = connect({ port: this.port, host: '127.0.0.1' }, () => {
        this.closed = false;
        resolve();
      });
      socket.setNoDelay(true);
      socket.on('data', (chunk: Buffer) => {
        this.buffer = Buffer.concat([this.buffer, chunk]);
        this.wake();
      });
      const onGone = () => {
        if (this.socket === socket) this.closed = true;
        this.wake();
      };
      socket.on('close', onGone);
      socket.on('end', onGone);
      socket.on('error', (error) => {
        onGone();
        reject(error);
      });
      this.socket = socket;
    });
  }

  private wake(): void {
    const waiter = this.waiter;
    this.waiter = undefined;
    waiter?.();
  }

  /** A complete response at the head of the buffer, consumed; or undefined when more bytes are needed. */
  private tryParse(head: boolean): RawResponse | undefined {
    const end = this.buffer.indexOf('\r\n\r\n');
    if (end < 0) return undefined;
    const [statusLine, ...headerLines] = this.buffer.subarray(0, end).toString('latin1').split('\r\n');
    const status = Number(statusLine.split(' ')[1]);
    const headers: Record<string, string> = {};
    for (const line of headerLines) {
      const colon = line.indexOf(':');
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim();
      headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
    }
    let offset = end + 4;
    let body: Buffer;
    if (head || status === 204 || status === 304) {
      body = Buffer.alloc(0);
    } else if (/chunked/i.test(headers['transfer-encoding'] ?? '')) {
      const parts: Buffer[] = [];
      for (;;) {
        const lineEnd = this.buffer.indexOf('\r\n', offset);
        if (lineEnd < 0) return undefined;
        const size = parseInt(this.buffer.subarray(offset, lineEnd).toString('latin1'), 16);
        if (this.buffer.length < lineEnd + 2 + size + 2) return undefined;
        parts.push(this.buffer.subarray(lineEnd + 2, lineEnd + 2 + size));
        offset = lineEnd + 2 + size + 2;
        if (size === 0) break;
      }
      body = Buffer.concat(parts);
    } else if (headers['content-length'] !== undefined) {
      const length = Number(headers['content-length']);
      if (this.buffer.length < offset + length) return undefined;
      body = this.buffer.subarray(offset, offset + length);
      offset += length;
    } else {
      // No length: the body runs until the server closes the connection.
      if (!this.closed) return undefined;
      body = this.buffer.subarray(offset);
      offset = this.buffer.length;
    }
    this.buffer = this.buffer.subarray(offset);
    const closing = /close/i.test(headers.connection ?? '');
    if (closing) this.close();
    return { status, headers, body: Buffer.from(body), closed: closing || this.closed };
  }
}

class ConnectionClosedError extends Error {
  constructor(readonly bufferedBytes: number) {
    super(`connection closed before a complete response (${bufferedBytes} bytes buffered)`);
  }
}
