import type { INestApplication, Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { IoAdapter } from '@nestjs/platform-socket.io';
import { WsAdapter } from '@nestjs/platform-ws';
import { io, type Socket as IoClient } from 'socket.io-client';
import { WebSocket } from 'ws';
import { freePort } from '../messages/support.js';

export type GatewayPlatform = 'socket.io' | 'ws';

/** What a client saw after sending one message: the ack (socket.io) or reply (ws), an event, Nest's `exception` event, or nothing yet. */
export type Seen =
  | { readonly kind: 'ack'; readonly value: unknown }
  | { readonly kind: 'event'; readonly event: string; readonly data: unknown }
  | { readonly kind: 'exception'; readonly data: unknown };

export interface GatewayApp {
  readonly app: INestApplication;
  readonly base: string;
  close(): Promise<void>;
}

/** An HTTP application on a free port with the platform's WebSocket adapter. */
export async function startGatewayApp(platform: GatewayPlatform, module: Type<unknown>): Promise<GatewayApp> {
  const app = await NestFactory.create(module, { logger: false });
  app.useWebSocketAdapter(platform === 'socket.io' ? new IoAdapter(app) : new WsAdapter(app));
  const port = await freePort();
  await app.listen(port, '127.0.0.1');
  return { app, base: `http://127.0.0.1:${port}`, close: () => app.close() };
}

/** One client socket: `send` a message and get what the client saw first; `close` it (a lost connection). */
export interface GatewayClient {
  send(event: string, data: unknown, timeoutMs?: number): Promise<Seen>;
  /** Sends without waiting for anything (the answer may never be seen). */
  fire(event: string, data: unknown): void;
  close(): void;
}

const open = new Set<GatewayClient>();

/** Closes every client still open: call it in afterEach / afterAll. */
export function closeClients(): void {
  for (const client of open) client.close();
  open.clear();
}

/**
 * Connects to `path` (a socket.io namespace, a ws gateway path) of `base`. socket.io:
 * `auth` is the handshake's auth, `headers` its extra headers; ws: `headers` go with the
 * upgrade request.
 */
export async function connect(
  platform: GatewayPlatform,
  base: string,
  path: string,
  options: { auth?: Record<string, unknown>; headers?: Record<string, string> } = {},
): Promise<GatewayClient> {
  const client = platform === 'socket.io' ? await connectIo(base, path, options) : await connectWs(base, path, options.headers);
  open.add(client);
  return client;
}

function deadline<T>(what: string, timeoutMs: number, run: (done: (value: T) => void) => void): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`nothing seen for ${what} within ${timeoutMs} ms`)), timeoutMs);
    run((value) => {
      clearTimeout(timer);
      resolve(value);
    });
  });
}

async function connectIo(base: string, path: string, options: { auth?: Record<string, unknown>; headers?: Record<string, string> }) {
  const socket: IoClient = io(`${base}${path}`, {
    transports: ['websocket'],
    reconnection: false,
    ...(options.auth ? { auth: options.auth } : {}),
    ...(options.headers ? { extraHeaders: options.headers } : {}),
  });
  await deadline<void>(`the connection to ${path}`, 10_000, (done) => socket.once('connect', () => done()));
  let waiting: ((seen: Seen) => void) | undefined;
  socket.onAny((event: string, data: unknown) =>
    waiting?.(event === 'exception' ? { kind: 'exception', data } : { kind: 'event', event, data }),
  );
  const client: GatewayClient = {
    send: (event, data, timeoutMs = 10_000) =>
      deadline<Seen>(event, timeoutMs, (done) => {
        waiting = done;
        socket.emit(event, data, (value: unknown) => done({ kind: 'ack', value }));
      }),
    fire: (event, data) => void socket.emit(event, data, () => undefined),
    close: () => {
      socket.close();
      open.delete(client);
    },
  };
  return client;
}

async function connectWs(base: string, path: string, headers: Record<string, string> = {}) {
  const socket = new WebSocket(`${base.replace('http', 'ws')}${path}`, { headers });
  await deadline<void>(`the connection to ${path}`, 10_000, (done) => socket.once('open', () => done()));
  let waiting: ((seen: Seen) => void) | undefined;
  socket.on('message', (raw) => {
    const parsed = JSON.parse(String(raw)) as { event?: unknown; data?: unknown };
    if (parsed && typeof parsed === 'object' && typeof parsed.event === 'string') {
      waiting?.(
        parsed.event === 'exception' ? { kind: 'exception', data: parsed.data } : { kind: 'event', event: parsed.event, data: parsed.data },
      );
    } else waiting?.({ kind: 'ack', value: parsed });
  });
  const client: GatewayClient = {
    send: (event, data, timeoutMs = 10_000) =>
      deadline<Seen>(event, timeoutMs, (done) => {
        waiting = done;
        socket.send(JSON.stringify({ event, data }));
      }),
    fire: (event, data) => socket.send(JSON.stringify({ event, data })),
    close: () => {
      socket.terminate();
      open.delete(client);
    },
  };
  return client;
}
