import { Injectable, Module, type INestApplicationContext, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { EventEmitter2, EventEmitterModule, OnEvent } from '@nestjs/event-emitter';
import type Redis from 'ioredis';
import { Idempotent, IdempotencyConfigurationError, IdempotencyModule, type IdempotencyModuleOptions } from '../../lib/index.js';
import { RedisIdempotencyStore } from '../../lib/redis/index.js';
import { Effects } from '../support/effects.js';
import { Gate, deleteKeys, redisClient, runPrefix, until } from './support.js';

/** `@Idempotent({ key })` on @nestjs/event-emitter listeners: once per key, however often the event is emitted. */

interface OrderPaid {
  orderId: string;
  amount: number;
}

const effects = new Effects();
let gate: Gate | undefined;

@Injectable()
class ReceiptListener {
  @OnEvent('order.paid')
  @Idempotent({ key: (event: OrderPaid) => event.orderId })
  async sendReceipt(event: OrderPaid): Promise<string> {
    effects.hit(`receipt:${event.orderId}`);
    await gate?.passed;
    return `receipt for ${event.orderId}`;
  }
}

@Injectable()
class LedgerListener {
  // Either order of the decorators works.
  @Idempotent({ key: (event: OrderPaid) => event.orderId })
  @OnEvent('order.paid')
  async post(event: OrderPaid): Promise<void> {
    effects.hit(`ledger:${event.orderId}`);
  }
}

async function start(idempotency: IdempotencyModuleOptions, providers: Type<unknown>[] = [ReceiptListener, LedgerListener]) {
  @Module({ imports: [EventEmitterModule.forRoot(), IdempotencyModule.forRoot({ logger: false, ...idempotency })], providers })
  class EventsModule {}
  const app = await NestFactory.createApplicationContext(EventsModule, { logger: false });
  await app.init();
  return app;
}

const prefix = runPrefix('events');
let redis: Redis;
const clients: Redis[] = [];
const apps: INestApplicationContext[] = [];
let n = 0;
const orderId = () => `order-${process.pid}-${++n}`;

function store(): RedisIdempotencyStore {
  const client = redisClient();
  clients.push(client);
  return new RedisIdempotencyStore(client, { prefix: `${prefix}:idem:` });
}

beforeAll(async () => {
  redis = redisClient();
  apps.push(await start({ store: store() }), await start({ store: store() }));
});
afterAll(async () => {
  gate?.open();
  for (const app of apps) await app.close();
  for (const client of clients) client.disconnect();
  await deleteKeys(redis, prefix);
  redis.disconnect();
});

describe('@Idempotent({ key }) on @OnEvent() listeners', () => {
  it('runs each listener once per key for an event emitted many times at once in two applications', async () => {
    const id = orderId();
    gate = new Gate();
    const emitted = apps.flatMap((app) =>
      Array.from({ length: 25 }, () => app.get(EventEmitter2).emitAsync('order.paid', { orderId: id, amount: 10 })),
    );
    await until('the receipt listener to run', () => effects.count(`receipt:${id}`) === 1);
    gate.open();
    const answers = await Promise.all(emitted);
    expect(effects.count(`receipt:${id}`)).toBe(1);
    // Two listeners of one event are two operations: each runs once.
    expect(effects.count(`ledger:${id}`)).toBe(1);
    // emitAsync collects the listeners' values: every duplicate gets the first one's.
    for (const values of answers) expect(values).toContain(`receipt for ${id}`);
  });

  it('runs again for another key', async () => {
    const a = orderId();
    const b = orderId();
    await apps[0].get(EventEmitter2).emitAsync('order.paid', { orderId: a, amount: 1 });
    await apps[1].get(EventEmitter2).emitAsync('order.paid', { orderId: b, amount: 1 });
    await apps[1].get(EventEmitter2).emitAsync('order.paid', { orderId: a, amount: 1 });
    expect([effects.count(`receipt:${a}`), effects.count(`receipt:${b}`)]).toEqual([1, 1]);
  });

  it('stops the boot for a listener without a key, saying how to derive one from the payload', async () => {
    @Injectable()
    class KeylessListener {
      @OnEvent('order.shipped')
      @Idempotent()
      async notify(event: { orderId: string }) {
        return event.orderId;
      }
    }
    const boot = start({}, [KeylessListener]);
    await expect(boot).rejects.toBeInstanceOf(IdempotencyConfigurationError);
    await expect(boot).rejects.toThrow(
      /KeylessListener\.notify \(an @OnEvent\('order\.shipped'\) listener\) has no request .* needs a key option/,
    );
    await expect(boot).rejects.toMatchObject({ hint: expect.stringContaining('key: (event: OrderPaid) => event.orderId') });
  });
});
