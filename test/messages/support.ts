import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createServer } from 'node:net';
import * as amqp from 'amqplib';
import type { INestMicroservice, Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ClientProxyFactory, Transport, type ClientProxy, type MicroserviceOptions } from '@nestjs/microservices';
import { MemoryIdempotencyStore, type CompleteRequest } from '../../lib/index.js';

export const RABBITMQ_URL = process.env.RABBITMQ_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
export const NATS_URL = process.env.NATS_URL ?? 'nats://127.0.0.1:4222';
/** Set NEST_LOGS=1 to see Nest's own logs while debugging these tests. */
export const NEST_LOGGER = process.env.NEST_LOGS ? undefined : (false as const);

let sequence = 0;
/** A name no other run or Jest worker uses (queues, subjects, keys). */
export function uniqueName(prefix: string): string {
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${++sequence}`;
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Polls until `condition` holds; fails with `what` after `timeoutMs`. */
export async function waitFor(what: string, condition: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return;
    if (Date.now() > deadline) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(10);
  }
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export { Effects } from '../support/effects.js';

/** One ordered log shared by the store and the broker observers, to compare "stored" with "acked". */
export type Trace = string[];

/** The memory store, writing `stored:<n>` to a trace once each `complete` has really been applied. */
export class TracingStore extends MemoryIdempotencyStore {
  completions = 0;
  constructor(private readonly trace: Trace) {
    super();
  }
  override async complete(key: string, token: string, request: CompleteRequest): Promise<boolean> {
    const owned = await super.complete(key, token, request);
    if (owned) this.trace.push(`stored:${++this.completions}`);
    return owned;
  }
}

interface ObservedChannel {
  ack(message: amqp.Message, allUpTo?: boolean): void;
  nack(message: amqp.Message, allUpTo?: boolean, requeue?: boolean): void;
  reject(message: amqp.Message, requeue?: boolean): void;
}

/**
 * Records every ack/nack made on the real amqplib channel of a Nest consumer (reached
 * through `RmqContext.getChannelRef()` in a handler), so a test can check their order
 * against the store and that no delivery is settled twice. The calls still go through.
 */
export class ChannelObserver {
  /**
   * Successful acks and nacks, in order; an attempt on a closed channel is traced as `<kind>-failed`.
   * A `basic.reject` counts as a nack (`method: 'reject'`): both settle one delivery negatively.
   */
  readonly settlements: {
    kind: 'ack' | 'nack';
    method?: 'reject';
    channel: number;
    deliveryTag: number;
    requeue?: boolean;
    messageId?: string;
  }[] = [];
  private readonly channels = new WeakMap<object, number>();
  constructor(private readonly trace: Trace) {}

  observe(channel: ObservedChannel): void {
    if (this.channels.has(channel)) return;
    const channelNo = this.channels.set(channel, this.channelCount++) && this.channelCount;
    const ack = channel.ack.bind(channel);
    const nack = channel.nack.bind(channel);
    const reject = channel.reject.bind(channel);
    channel.ack = (message, allUpTo) => this.record(channelNo, 'ack', message, undefined, () => ack(message, allUpTo));
    channel.nack = (message, allUpTo, requeue) =>
      this.record(channelNo, 'nack', message, requeue ?? true, () => nack(message, allUpTo, requeue));
    channel.reject = (message, requeue) =>
      this.record(channelNo, 'nack', message, requeue ?? true, () => reject(message, requeue), 'reject');
  }

  count(kind: 'ack' | 'nack', messageId?: string): number {
    return this.settlements.filter((s) => s.kind === kind && (messageId === undefined || s.messageId === messageId)).length;
  }

  private channelCount = 0;

  private record(
    channel: number,
    kind: 'ack' | 'nack',
    message: amqp.Message,
    requeue: boolean | undefined,
    call: () => void,
    method?: 'reject',
  ): void {
    const messageId = message.properties.messageId as string | undefined;
    try {
      call();
    } catch (error) {
      this.trace.push(`${kind}-failed:${messageId ?? '-'}`);
      throw error;
    }
    this.settlements.push({ kind, ...(method && { method }), channel, deliveryTag: message.fields.deliveryTag, requeue, messageId });
    this.trace.push(`${kind}:${messageId ?? '-'}`);
  }
}

/** A plain amqplib connection beside the Nest apps: publishes raw messages and inspects queues. */
export class RabbitProbe {
  private constructor(
    private readonly connection: amqp.ChannelModel,
    readonly channel: amqp.Channel,
  ) {}

  static async open(): Promise<RabbitProbe> {
    const connection = await amqp.connect(RABBITMQ_URL);
    const channel = await connection.createChannel();
    return new RabbitProbe(connection, channel);
  }

  /** Publishes in Nest's RMQ shape: `{ pattern, data }` is an event, with `id` a request. */
  publish(queue: string, pattern: string, data: unknown, properties: amqp.Options.Publish = {}): void {
    this.channel.sendToQueue(queue, Buffer.from(JSON.stringify({ pattern, data })), properties);
  }

  /** Publishes `body` as plain JSON, for consumers outside Nest. */
  sendJson(queue: string, body: unknown, properties: amqp.Options.Publish = {}): void {
    this.channel.sendToQueue(queue, Buffer.from(JSON.stringify(body)), properties);
  }

  /** Ready (not unacked) messages in a queue. */
  async readyCount(queue: string): Promise<number> {
    return (await this.channel.checkQueue(queue)).messageCount;
  }

  async consumerCount(queue: string): Promise<number> {
    return (await this.channel.checkQueue(queue)).consumerCount;
  }

  async deleteQueues(...queues: string[]): Promise<void> {
    for (const queue of queues) await this.channel.deleteQueue(queue).catch(() => undefined);
  }

  async close(): Promise<void> {
    await this.connection.close();
  }
}

/** The major version of the installed @nestjs/microservices (CI runs 11 and 12). */
export function nestMicroservicesMajor(): number {
  const entry = require.resolve('@nestjs/microservices');
  const manifest = JSON.parse(readFileSync(join(dirname(entry), 'package.json'), 'utf8')) as { version: string };
  return Number(manifest.version.split('.')[0]);
}

/** A TCP microservice of `module` on a free port, and a client connected to it; close both in afterAll. */
export async function startTcpMicroservice(module: Type<unknown>): Promise<{ app: INestMicroservice; client: ClientProxy }> {
  const port = await freePort();
  const app = await NestFactory.createMicroservice<MicroserviceOptions>(module, {
    transport: Transport.TCP,
    options: { host: '127.0.0.1', port },
    logger: NEST_LOGGER,
  });
  await app.listen();
  const client = ClientProxyFactory.create({ transport: Transport.TCP, options: { host: '127.0.0.1', port } });
  await client.connect();
  return { app, client };
}
