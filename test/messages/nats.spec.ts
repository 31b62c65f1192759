import { Controller, Module, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  ClientProxyFactory,
  Ctx,
  EventPattern,
  MessagePattern,
  NatsRecordBuilder,
  Payload,
  Transport,
  type ClientProxy,
  type MicroserviceOptions,
  type NatsContext,
} from '@nestjs/microservices';
import * as natsV3 from '@nats-io/transport-node';
import * as natsV2 from 'nats';
import { firstValueFrom } from 'rxjs';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore, isIdempotencyRpcError, type IdempotencyEvent } from '../../lib/index.js';
import { Effects, NATS_URL, NEST_LOGGER, nestMicroservicesMajor, sleep, uniqueName, waitFor } from './support.js';

/** Nest 12 speaks NATS through @nats-io/transport-node, Nest 11 through nats 2: build headers with the one in use. */
const natsHeaders = (entries: Record<string, string>) => {
  const headers = nestMicroservicesMajor() >= 12 ? natsV3.headers() : natsV2.headers();
  for (const [name, value] of Object.entries(entries)) headers.set(name, value);
  return headers;
};

const SUBJECT = uniqueName('idem.refunds').replace(/-/g, '_');
const QUOTE = `${SUBJECT}.quote`;
const ISSUED = `${SUBJECT}.issued`;
const effects = new Effects();
const subjects: string[] = [];

@Controller()
class RefundsNatsController {
  @MessagePattern(QUOTE)
  @Idempotent()
  async quote(@Payload() data: { refundId: string; amount: number }, @Ctx() context: NatsContext) {
    subjects.push(context.getSubject());
    const quoteNo = effects.hit(`quote:${data.refundId}`);
    await sleep(30);
    return { refundId: data.refundId, amount: data.amount, quoteNo };
  }

  @EventPattern<string>(ISSUED)
  @Idempotent()
  issued(@Payload() data: { refundId: string }) {
    effects.hit(`issued:${data.refundId}`);
  }
}

describe('NATS: @Idempotent() keyed by message headers', () => {
  const events: IdempotencyEvent[] = [];
  let app: INestMicroservice | undefined;
  let client: ClientProxy | undefined;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), onEvent: (e) => events.push(e) })],
      controllers: [RefundsNatsController],
    })
    class NatsModule {}
    app = await NestFactory.createMicroservice<MicroserviceOptions>(NatsModule, {
      transport: Transport.NATS,
      options: { servers: [NATS_URL] },
      logger: NEST_LOGGER,
    });
    await app.listen();
    client = ClientProxyFactory.create({ transport: Transport.NATS, options: { servers: [NATS_URL] } });
    await client.connect();
  });

  afterAll(async () => {
    await client?.close();
    await app?.close();
  });

  const quote = (data: unknown, headers?: Record<string, string>) => {
    const record = new NatsRecordBuilder(data);
    if (headers) record.setHeaders(natsHeaders(headers));
    return firstValueFrom(client!.send(QUOTE, record.build()));
  };

  it('runs a request once for 10 concurrent duplicates carrying one Idempotency-Key header', async () => {
    const refundId = uniqueName('refund');
    const answers = await Promise.all(Array.from({ length: 10 }, () => quote({ refundId, amount: 9 }, { 'Idempotency-Key': refundId })));
    expect(effects.count(`quote:${refundId}`)).toBe(1);
    for (const answer of answers) expect(answer).toEqual({ refundId, amount: 9, quoteNo: 1 });
    // And a late duplicate replays without running.
    await expect(quote({ refundId, amount: 9 }, { 'Idempotency-Key': refundId })).resolves.toEqual({ refundId, amount: 9, quoteNo: 1 });
    expect(effects.count(`quote:${refundId}`)).toBe(1);
    expect(subjects.every((s) => s === QUOTE)).toBe(true);
  });

  it('skips duplicate events carrying one Nats-Msg-Id header', async () => {
    const refundId = uniqueName('refund');
    for (let i = 0; i < 3; i++) {
      client!.emit(ISSUED, new NatsRecordBuilder({ refundId }).setHeaders(natsHeaders({ 'Nats-Msg-Id': refundId })).build());
    }
    await waitFor(
      'the three events settled',
      () =>
        events.filter((e) => e.handler === 'RefundsNatsController.issued' && (e.type === 'completed' || e.type === 'replayed')).length ===
        3,
    );
    expect(effects.count(`issued:${refundId}`)).toBe(1);
  });

  it('answers a request without a key with an RPC error naming the NATS headers', async () => {
    const error = await quote({ refundId: uniqueName('refund'), amount: 1 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(isIdempotencyRpcError(error)).toBe(true);
    expect(error).toMatchObject({ status: 400, code: 'IDEMPOTENCY_KEY_MISSING' });
    expect((error as { message: string }).message).toMatch(/Idempotency-Key or Nats-Msg-Id header/);
  });

  it('answers a key reused with another payload with IDEMPOTENCY_FINGERPRINT_MISMATCH', async () => {
    const refundId = uniqueName('refund');
    await quote({ refundId, amount: 1 }, { 'Idempotency-Key': refundId });
    const error = await quote({ refundId, amount: 2 }, { 'Idempotency-Key': refundId }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toMatchObject({ status: 422, code: 'IDEMPOTENCY_FINGERPRINT_MISMATCH' });
    expect(effects.count(`quote:${refundId}`)).toBe(1);
  });
});
