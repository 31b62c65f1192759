import { Controller, UseGuards, type INestMicroservice } from '@nestjs/common';
import { ClientProxyFactory, MessagePattern, Payload, RmqRecordBuilder, Transport, type ClientProxy } from '@nestjs/microservices';
import { firstValueFrom } from 'rxjs';
import { Idempotent, MemoryIdempotencyStore } from '../../lib/index.js';
import { ConsumerEnv, channelObserverGuard, rmqQueueOptions, startRmqConsumer, type RefundRequested } from './rmq-app.js';
import { RABBITMQ_URL, RabbitProbe, uniqueName, waitFor } from './support.js';

/**
 * A request (`ClientProxy.send`, with `replyTo`) whose handler throws is answered: Nest
 * sends the error to the caller, who owns the retry. Requeueing it as well ran the
 * handler again behind the caller's back (the caller told "failed" while the effect
 * happened) and sent a second reply to a correlationId nobody listened to any more.
 */
describe('RabbitMQ: a @MessagePattern request whose handler throws, with ack: true', () => {
  const queue = uniqueName('idem-failed-request');
  const env = new ConsumerEnv();
  let probe: RabbitProbe;
  let app: INestMicroservice | undefined;
  let client: ClientProxy | undefined;

  @Controller()
  @UseGuards(channelObserverGuard(env))
  class QuotesConsumer {
    @MessagePattern('quote.flaky')
    @Idempotent({ ack: true })
    quote(@Payload() data: RefundRequested): { quoteNo: number } {
      env.attempts.hit(data.refundId);
      const failures = env.failuresLeft.get(data.refundId) ?? 0;
      if (failures > 0) {
        env.failuresLeft.set(data.refundId, failures - 1);
        throw new Error('pricing service unavailable');
      }
      return { quoteNo: env.effects.hit(data.refundId) };
    }
  }

  beforeAll(async () => {
    probe = await RabbitProbe.open();
    app = await startRmqConsumer({ queue, store: new MemoryIdempotencyStore(), env, controller: QuotesConsumer });
    client = ClientProxyFactory.create({
      transport: Transport.RMQ,
      options: { urls: [RABBITMQ_URL], queue, queueOptions: rmqQueueOptions() },
    });
    await client.connect();
  });

  afterAll(async () => {
    await client?.close();
    await app?.close();
    await probe.deleteQueues(queue);
    await probe.close();
  });

  const send = (refundId: string) =>
    firstValueFrom(
      client!.send('quote.flaky', new RmqRecordBuilder({ refundId, amount: 5 }).setOptions({ messageId: refundId }).build()),
    ).then(
      (value: unknown) => ({ ok: true as const, value }),
      (error: unknown) => ({ ok: false as const, error }),
    );

  it('acks the failed delivery instead of requeueing it: the handler runs once, then again only on the caller’s retry, and a later call replays', async () => {
    const refundId = uniqueName('quote');
    env.failuresLeft.set(refundId, 1);

    const failed = await send(refundId);
    expect(failed.ok).toBe(false);
    await waitFor('the failed delivery settled', () => env.observer.settlements.some((s) => s.messageId === refundId));
    expect(env.observer.settlements.filter((s) => s.messageId === refundId).map((s) => s.kind)).toEqual(['ack']);
    expect(env.attempts.count(refundId)).toBe(1);
    expect(env.effects.count(refundId)).toBe(0);

    // A requeued copy would sit ahead of the retry in the queue and run first.
    const retried = await send(refundId);
    expect(retried).toEqual({ ok: true, value: { quoteNo: 1 } });
    expect(env.attempts.count(refundId)).toBe(2);

    const replayed = await send(refundId);
    expect(replayed).toEqual({ ok: true, value: { quoteNo: 1 } });
    expect(env.attempts.count(refundId)).toBe(2);
    expect(env.effects.count(refundId)).toBe(1);
    await waitFor('all three deliveries acked', () => env.observer.count('ack', refundId) === 3);
    expect(env.observer.count('nack', refundId)).toBe(0);
    expect(await probe.readyCount(queue)).toBe(0);
  });
});
