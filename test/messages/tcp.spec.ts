import { Body, Controller, Module, Post, type ExecutionContext, type INestApplication, type INestMicroservice } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  ClientProxyFactory,
  EventPattern,
  MessagePattern,
  Payload,
  RpcException,
  Transport,
  type ClientProxy,
  type MicroserviceOptions,
} from '@nestjs/microservices';
import request from 'supertest';
import { firstValueFrom } from 'rxjs';
import {
  Idempotent,
  IdempotencyInterceptor,
  IdempotencyModule,
  MemoryIdempotencyStore,
  isIdempotencyRpcError,
  type IdempotencyEvent,
} from '../../lib/index.js';
import { Effects, NEST_LOGGER, freePort, sleep, startTcpMicroservice, uniqueName, waitFor } from './support.js';

interface RefundCommand {
  requestId?: string;
  refundId: string;
  amount: number;
}

/** TCP messages carry no id of their own: the key comes from the payload. */
const requestIdOf = (context: ExecutionContext) => context.switchToRpc().getData<RefundCommand>().requestId;

const effects = new Effects();
const failNext = new Set<string>();

@Controller()
class RefundsTcpController {
  @MessagePattern('refund.create')
  @Idempotent({ key: requestIdOf })
  async create(@Payload() data: RefundCommand) {
    const n = effects.hit(`create:${data.refundId}`);
    await sleep(30);
    if (failNext.delete(data.refundId)) throw new Error('ledger unavailable');
    return { refundId: data.refundId, amount: data.amount, attempt: n };
  }

  @MessagePattern('refund.validate')
  @Idempotent({ key: requestIdOf, cacheErrors: (error) => error instanceof RpcException })
  validate(@Payload() data: RefundCommand) {
    effects.hit(`validate:${data.refundId}`);
    throw new RpcException({ status: 'error', code: 'REFUND_EXCEEDS_CHARGE', message: `refund ${data.refundId} exceeds its charge` });
  }

  @EventPattern<string>('refund.created')
  @Idempotent({ key: requestIdOf })
  created(@Payload() data: RefundCommand) {
    effects.hit(`created:${data.refundId}`);
  }
}

const settle = <T>(promise: Promise<T>) =>
  promise.then(
    () => undefined,
    (error: unknown) => error,
  );

describe('TCP: @Idempotent() with the key option reading the payload', () => {
  const events: IdempotencyEvent[] = [];
  let app: INestMicroservice | undefined;
  let client: ClientProxy | undefined;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), onEvent: (e) => events.push(e) })],
      controllers: [RefundsTcpController],
    })
    class TcpModule {}
    ({ app, client } = await startTcpMicroservice(TcpModule));
  });

  afterAll(async () => {
    await client?.close();
    await app?.close();
  });

  const send = (pattern: string, data: RefundCommand) => firstValueFrom(client!.send(pattern, data));

  it('replays a @MessagePattern result, for sequential and concurrent duplicates', async () => {
    const refundId = uniqueName('refund');
    const command = { requestId: `req-${refundId}`, refundId, amount: 12 };
    const first = await send('refund.create', command);
    const duplicates = await Promise.all(Array.from({ length: 10 }, () => send('refund.create', command)));
    expect(effects.count(`create:${refundId}`)).toBe(1);
    expect(first).toEqual({ refundId, amount: 12, attempt: 1 });
    for (const duplicate of duplicates) expect(duplicate).toEqual(first);

    const concurrentId = uniqueName('refund');
    const concurrent = await Promise.all(
      Array.from({ length: 10 }, () => send('refund.create', { requestId: `req-${concurrentId}`, refundId: concurrentId, amount: 3 })),
    );
    expect(effects.count(`create:${concurrentId}`)).toBe(1);
    expect(new Set(concurrent.map((answer) => JSON.stringify(answer))).size).toBe(1);
  });

  it('releases the key when the handler throws, so the retry runs', async () => {
    const refundId = uniqueName('refund');
    const command = { requestId: `req-${refundId}`, refundId, amount: 4 };
    failNext.add(refundId);
    const error = await settle(send('refund.create', command));
    expect(error).toMatchObject({ status: 'error', message: 'Internal server error' });
    await expect(send('refund.create', command)).resolves.toEqual({ refundId, amount: 4, attempt: 2 });
    await expect(send('refund.create', command)).resolves.toEqual({ refundId, amount: 4, attempt: 2 });
  });

  it('replays a cached RpcException to the client exactly as the first time', async () => {
    const refundId = uniqueName('refund');
    const command = { requestId: `req-${refundId}`, refundId, amount: 1_000 };
    const first = await settle(send('refund.validate', command));
    const second = await settle(send('refund.validate', command));
    expect(first).toEqual({ status: 'error', code: 'REFUND_EXCEEDS_CHARGE', message: `refund ${refundId} exceeds its charge` });
    expect(second).toEqual(first);
    expect(effects.count(`validate:${refundId}`)).toBe(1);
  });

  it('sends the library errors as { status, code, message, hint } with the HTTP codes', async () => {
    const missing = await settle(send('refund.create', { refundId: uniqueName('refund'), amount: 1 }));
    expect(isIdempotencyRpcError(missing)).toBe(true);
    expect(missing).toMatchObject({ status: 400, code: 'IDEMPOTENCY_KEY_MISSING' });
    expect((missing as { message: string }).message).toMatch(/key option of @Idempotent\(\) returned nothing/);
    expect((missing as { hint: string }).hint).toEqual(expect.any(String));

    const invalid = await settle(send('refund.create', { requestId: 'x'.repeat(300), refundId: uniqueName('refund'), amount: 1 }));
    expect(invalid).toMatchObject({ status: 400, code: 'IDEMPOTENCY_KEY_INVALID' });

    const refundId = uniqueName('refund');
    await send('refund.create', { requestId: `req-${refundId}`, refundId, amount: 1 });
    const mismatch = await settle(send('refund.create', { requestId: `req-${refundId}`, refundId, amount: 2 }));
    expect(mismatch).toMatchObject({
      status: 422,
      code: 'IDEMPOTENCY_FINGERPRINT_MISMATCH',
      hint: expect.stringMatching(/Reuse a key only/),
    });
  });

  it('skips a duplicate @EventPattern event without running the handler', async () => {
    const refundId = uniqueName('refund');
    const command = { requestId: `evt-${refundId}`, refundId, amount: 5 };
    for (let i = 0; i < 3; i++) await firstValueFrom(client!.emit('refund.created', command), { defaultValue: undefined });
    await waitFor(
      'three events settled',
      () => events.filter((e) => e.handler === 'RefundsTcpController.created' && ['completed', 'replayed'].includes(e.type)).length === 3,
    );
    expect(effects.count(`created:${refundId}`)).toBe(1);
  });
});

describe('Hybrid app: HTTP plus a TCP microservice with the interceptor registered globally', () => {
  const events: IdempotencyEvent[] = [];
  const hybridEffects = new Effects();
  let app: INestApplication | undefined;
  let client: ClientProxy | undefined;

  @Controller('refunds')
  class HybridRefundsController {
    @Post()
    @Idempotent()
    viaHttp(@Body() body: { refundId: string }) {
      return { refundId: body.refundId, n: hybridEffects.hit(`http:${body.refundId}`) };
    }

    @MessagePattern('hybrid.refund')
    @Idempotent({ key: requestIdOf })
    viaTcp(@Payload() data: RefundCommand) {
      return { refundId: data.refundId, n: hybridEffects.hit(`tcp:${data.refundId}`) };
    }
  }

  beforeAll(async () => {
    const port = await freePort();
    @Module({
      imports: [IdempotencyModule.forRoot({ isGlobal: true, onEvent: (e) => events.push(e) })],
      controllers: [HybridRefundsController],
    })
    class HybridModule {}
    app = await NestFactory.create(HybridModule, { logger: NEST_LOGGER });
    app.useGlobalInterceptors(app.get(IdempotencyInterceptor));
    // inheritAppConfig: without it, global interceptors, pipes and filters stay HTTP-only.
    app.connectMicroservice<MicroserviceOptions>(
      { transport: Transport.TCP, options: { host: '127.0.0.1', port } },
      { inheritAppConfig: true },
    );
    await app.startAllMicroservices();
    await app.init();
    client = ClientProxyFactory.create({ transport: Transport.TCP, options: { host: '127.0.0.1', port } });
    await client.connect();
  });

  afterAll(async () => {
    await client?.close();
    await app?.close();
  });

  it('runs the protocol once per message even though the interceptor is both global and on the handler', async () => {
    const refundId = uniqueName('refund');
    const command = { requestId: `req-${refundId}`, refundId, amount: 8 };
    const first = await firstValueFrom(client!.send('hybrid.refund', command));
    const second = await firstValueFrom(client!.send('hybrid.refund', command));
    expect(first).toEqual({ refundId, n: 1 });
    expect(second).toEqual(first);
    expect(hybridEffects.count(`tcp:${refundId}`)).toBe(1);
    const mine = events.filter((e) => e.handler === 'HybridRefundsController.viaTcp');
    expect(mine.map((e) => e.type)).toEqual(['claimed', 'completed', 'replayed']);
  });

  it('keeps HTTP handlers of the same app idempotent', async () => {
    const refundId = uniqueName('refund');
    const server = app!.getHttpServer();
    const first = await request(server).post('/refunds').set('Idempotency-Key', refundId).send({ refundId });
    const second = await request(server).post('/refunds').set('Idempotency-Key', refundId).send({ refundId });
    expect(second.body).toEqual(first.body);
    expect(second.headers['idempotent-replayed']).toBe('true');
    expect(hybridEffects.count(`http:${refundId}`)).toBe(1);
  });
});
