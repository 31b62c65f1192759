import { Controller, Module, type ExecutionContext, type INestMicroservice, type Type } from '@nestjs/common';
import { APP_INTERCEPTOR, NestFactory } from '@nestjs/core';
import {
  ClientProxyFactory,
  Ctx,
  MessagePattern,
  NatsRecordBuilder,
  Payload,
  RmqRecordBuilder,
  RpcException,
  Transport,
  type ClientProxy,
  type MicroserviceOptions,
  type NatsContext,
  type RmqContext,
} from '@nestjs/microservices';
import * as natsV3 from '@nats-io/transport-node';
import * as natsV2 from 'nats';
import { firstValueFrom } from 'rxjs';
import { Idempotent, IdempotencyInterceptor, IdempotencyModule, isIdempotencyRpcError } from '../../lib/index.js';
import { Effects } from '../support/effects.js';
import { NATS_URL, RABBITMQ_URL, RabbitProbe, freePort, nestMicroservicesMajor, uniqueName } from '../messages/support.js';
import { entryId } from './drivers.js';
import { StepProbe } from './steps.js';
import { Hold, IN_FLIGHT, KEY_MISSING, MISMATCH, type Answer, type ConformanceDriver, type ReplayCase } from './conformance.js';

/**
 * `@MessagePattern` handlers on a transport without message ids (TCP: the `key` option
 * reads the payload) and on brokers (NATS: the `Idempotency-Key` header; RabbitMQ: the
 * `messageId`, with `ack: true` and manual acknowledgement). There is no authenticated
 * principal on messages: the documented `scope` option carries the sender (the payload's
 * `tenant` on TCP, an `x-user` header on NATS and RabbitMQ).
 */
export type RpcTransport = 'tcp' | 'nats' | 'rmq';

interface Command {
  readonly tenant?: string;
  readonly ref?: string;
  readonly input: unknown;
}

export type RpcSeen = { readonly ok: true; readonly value: unknown } | { readonly ok: false; readonly error: unknown };

/** Nest 12 speaks NATS through @nats-io/transport-node, Nest 11 through nats 2. */
function natsHeaders(entries: Record<string, string>) {
  const headers = nestMicroservicesMajor() >= 12 ? natsV3.headers() : natsV2.headers();
  for (const [name, value] of Object.entries(entries)) headers.set(name, value);
  return headers;
}

function natsHeader(context: ExecutionContext, name: string): string | undefined {
  const headers = context.switchToRpc().getContext<NatsContext>().getHeaders?.();
  const key = headers?.keys().find((candidate: string) => candidate.toLowerCase() === name);
  return key === undefined ? undefined : headers!.get(key) || undefined;
}

function rmqHeader(context: ExecutionContext, name: string): string | undefined {
  const headers = context.switchToRpc().getContext<RmqContext>().getMessage()?.properties?.headers as Record<string, unknown> | undefined;
  const value = headers?.[name];
  return typeof value === 'string' && value ? value : undefined;
}

function describeSeen(seen: RpcSeen): string {
  return seen.ok ? `the value ${JSON.stringify(seen.value)}` : `the error ${JSON.stringify(seen.error)}`;
}

const STATUS_OF: Record<string, number> = { [MISMATCH]: 422, [KEY_MISSING]: 400, [IN_FLIGHT]: 409 };

/** `interceptor`: IdempotencyInterceptor registered globally (APP_INTERCEPTOR) runs the protocol instead of @Idempotent()'s method wrapper. */
export function rpcDriver(transport: RpcTransport, driverOptions: { interceptor?: boolean } = {}): ConformanceDriver<unknown, RpcSeen> {
  const effects = new Effects();
  const hold = new Hold();
  const stepProbe = new StepProbe();
  // Subjects of this run alone: the NATS server is shared.
  const prefix = uniqueName(`conf_${transport}`).replace(/-/g, '_');
  const p = (name: string) => `${prefix}.${name}`;
  const options =
    transport === 'tcp'
      ? {
          key: (context: ExecutionContext) => context.switchToRpc().getData<Command>().ref,
          scope: (context: ExecutionContext) => context.switchToRpc().getData<Command>().tenant,
        }
      : transport === 'nats'
        ? { scope: (context: ExecutionContext) => natsHeader(context, 'x-user') }
        : { scope: (context: ExecutionContext) => rmqHeader(context, 'x-user'), ack: true };
  /** Who sent the command, as the handler sees it. */
  const tenantOf = (command: Command, context: NatsContext | RmqContext): string | undefined => {
    if (transport === 'tcp') return command.tenant;
    if (transport === 'nats') return (context as NatsContext).getHeaders?.()?.get('x-user') || undefined;
    const value = ((context as RmqContext).getMessage()?.properties?.headers as Record<string, unknown> | undefined)?.['x-user'];
    return typeof value === 'string' && value ? value : undefined;
  };

  const answer = (operation: string, tenant: string | undefined): Answer => ({ operation, principal: tenant, run: effects.hit(operation) });

  // The object patterns differ only in one field; Nest routes them by their canonical JSON.
  const V1 = { cmd: p('refund'), version: 1 };
  const V2 = { cmd: p('refund'), version: 2 };

  @Controller()
  class ConformanceController {
    @MessagePattern(p('refund'))
    @Idempotent(options)
    refund(@Payload() command: Command, @Ctx() context: NatsContext | RmqContext) {
      return answer('refund', tenantOf(command, context));
    }

    @MessagePattern(p('credit'))
    @Idempotent(options)
    credit(@Payload() command: Command, @Ctx() context: NatsContext | RmqContext) {
      return answer('credit', tenantOf(command, context));
    }

    @MessagePattern(V1)
    @Idempotent(options)
    refundV1(@Payload() command: Command, @Ctx() context: NatsContext | RmqContext) {
      return answer('{version:1}', tenantOf(command, context));
    }

    @MessagePattern(V2)
    @Idempotent(options)
    refundV2(@Payload() command: Command, @Ctx() context: NatsContext | RmqContext) {
      return answer('{version:2}', tenantOf(command, context));
    }

    @MessagePattern(p('held'))
    @Idempotent({ ...options, inFlight: 'reject' })
    async held(@Payload() command: Command, @Ctx() context: NatsContext | RmqContext) {
      const value = answer('held', tenantOf(command, context));
      await hold.gate;
      return value;
    }

    @MessagePattern(p('steps'))
    @Idempotent(options)
    async steps(@Payload() command: Command, @Ctx() context: NatsContext | RmqContext) {
      await stepProbe.run();
      return answer('steps', tenantOf(command, context));
    }

    @MessagePattern(p('decline'))
    @Idempotent({ ...options, cacheErrors: (error) => error instanceof RpcException })
    decline() {
      throw new RpcException({ status: 'error', code: 'REFUND_DECLINED', run: effects.hit('decline') });
    }

    @MessagePattern(p('quote'))
    @Idempotent(options)
    quote(@Payload() command: Command) {
      const run = effects.hit('quote');
      return { run, at: new Date(Date.UTC(2026, 0, 2, 3, 4, 5, run)), nested: { list: [1, 'two', null], amount: command.input } };
    }
  }

  /** Two controllers named RefundsController, one per feature module, each with its own pattern. */
  function featureModule(area: string): Type<unknown> {
    @Controller()
    class RefundsController {
      @MessagePattern(p(`${area}.refund`))
      @Idempotent(options)
      refund(@Payload() command: Command, @Ctx() context: NatsContext | RmqContext) {
        return answer(`${area}.refund`, tenantOf(command, context));
      }
    }
    @Module({ controllers: [RefundsController] })
    class FeatureModule {}
    return FeatureModule;
  }

  const PATTERNS: Record<string, unknown> = {
    refund: p('refund'),
    credit: p('credit'),
    quote: p('quote'),
    held: p('held'),
    steps: p('steps'),
    decline: p('decline'),
    '{version:1}': V1,
    '{version:2}': V2,
    'billing.refund': p('billing.refund'),
    'shipping.refund': p('shipping.refund'),
  };

  let app: INestMicroservice;
  let client: ClientProxy;

  const replays: ReplayCase<unknown, RpcSeen>[] = [
    {
      name: 'a cached RpcException (cacheErrors): the client receives the same error',
      operation: 'decline',
      input: {},
      cachedError: true,
      expectSame(first, replay) {
        expect(first).toEqual({ ok: false, error: { status: 'error', code: 'REFUND_DECLINED', run: expect.any(Number) } });
        expect(replay).toEqual(first);
      },
    },
    {
      name: 'a reply with a Date and nested values: the client receives the same reply',
      operation: 'quote',
      input: { amount: 7 },
      expectSame(first, replay) {
        expect(first.ok).toBe(true);
        expect(replay).toEqual(first);
        expect(JSON.stringify(replay)).toBe(JSON.stringify(first));
      },
    },
  ];

  return {
    entry: entryId(driverOptions.interceptor ? `${transport}-interceptor` : transport),
    async boot(store) {
      @Module({
        imports: [IdempotencyModule.forRoot({ store, logger: false, isGlobal: true }), featureModule('billing'), featureModule('shipping')],
        controllers: [ConformanceController],
        providers: driverOptions.interceptor ? [{ provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor }] : [],
      })
      class AppModule {}
      if (transport === 'tcp') {
        const port = await freePort();
        app = await NestFactory.createMicroservice<MicroserviceOptions>(AppModule, {
          transport: Transport.TCP,
          options: { host: '127.0.0.1', port },
          logger: false,
        });
        await app.listen();
        client = ClientProxyFactory.create({ transport: Transport.TCP, options: { host: '127.0.0.1', port } });
      } else if (transport === 'rmq') {
        app = await NestFactory.createMicroservice<MicroserviceOptions>(AppModule, {
          transport: Transport.RMQ,
          options: { urls: [RABBITMQ_URL], queue: prefix, noAck: false, queueOptions: { durable: false } },
          logger: false,
        });
        await app.listen();
        client = ClientProxyFactory.create({
          transport: Transport.RMQ,
          options: { urls: [RABBITMQ_URL], queue: prefix, queueOptions: { durable: false } },
        });
      } else {
        app = await NestFactory.createMicroservice<MicroserviceOptions>(AppModule, {
          transport: Transport.NATS,
          options: { servers: [NATS_URL] },
          logger: false,
        });
        await app.listen();
        client = ClientProxyFactory.create({ transport: Transport.NATS, options: { servers: [NATS_URL] } });
      }
      await client.connect();
    },
    async close() {
      await client?.close();
      await app?.close();
      if (transport === 'rmq') {
        const probe = await RabbitProbe.open();
        await probe.deleteQueues(prefix);
        await probe.close();
      }
    },
    async call({ operation, key, principal, input }) {
      const pattern = PATTERNS[operation];
      let payload: unknown;
      if (transport === 'tcp') {
        payload = { tenant: principal, ref: key, input };
      } else if (transport === 'rmq') {
        payload = new RmqRecordBuilder({ input })
          .setOptions({ ...(key !== undefined && { messageId: key }), headers: principal ? { 'x-user': principal } : {} })
          .build();
      } else {
        const headers: Record<string, string> = {};
        if (key !== undefined) headers['Idempotency-Key'] = key;
        if (principal) headers['x-user'] = principal;
        payload = new NatsRecordBuilder({ input }).setHeaders(natsHeaders(headers)).build();
      }
      try {
        return { ok: true, value: await firstValueFrom(client.send(pattern as string, payload)) };
      } catch (error) {
        return { ok: false, error };
      }
    },
    answerOf(seen) {
      if (!seen.ok) throw new Error(`expected a reply, the client got ${describeSeen(seen)}`);
      return seen.value as Answer;
    },
    refusalOf(seen) {
      if (seen.ok) return undefined;
      if (isIdempotencyRpcError(seen.error)) return seen.error.code;
      throw new Error(`expected the library's refusal, the client got ${describeSeen(seen)}`);
    },
    expectRefusalShape(seen, code) {
      // The RpcException's error as Nest's RPC filter sends it to the client: the problem body plus `message` (docs/messages.md).
      expect(seen.ok).toBe(false);
      const error = (seen as { error: unknown }).error;
      expect(error).toEqual({
        type: `urn:nestjs-idempotency:error:${code}`,
        title: expect.any(String),
        status: STATUS_OF[code],
        detail: expect.any(String),
        code,
        hint: expect.any(String),
        message: expect.any(String),
        // A client told to come back is told when.
        ...(code === IN_FLIGHT ? { retryAfterMs: expect.any(Number) } : {}),
      });
      expect(isIdempotencyRpcError(error)).toBe(true);
    },
    runs: (operation) => effects.count(operation),
    input: { amount: 10 },
    principals: {
      operation: 'credit',
      via: [transport === 'tcp' ? 'the scope option (the payload’s tenant)' : 'the scope option (an x-user header)'],
    },
    operations: [
      { name: 'two patterns', a: 'refund', b: 'credit' },
      { name: 'two object patterns that differ only in one field', a: '{version:1}', b: '{version:2}' },
      { name: 'two controllers whose classes share a name (RefundsController in two modules)', a: 'billing.refund', b: 'shipping.refund' },
    ],
    inputs: { operation: 'credit', pairs: [{ name: 'another payload', a: { amount: 1 }, b: { amount: 2 } }] },
    replays,
    refusals: { operation: 'credit', missingKey: true },
    inFlight: { operation: 'held', hold: hold.hold },
    steps: { operation: 'steps', probe: stepProbe },
  };
}
