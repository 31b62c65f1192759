import 'reflect-metadata';
import { Controller, Post } from '@nestjs/common';
import { Processor, WorkerHost } from '@nestjs/bullmq';
import { Mutation, Query, Resolver } from '@nestjs/graphql';
import { MessagePattern, Transport as NestTransport } from '@nestjs/microservices';
import { Cron } from '@nestjs/schedule';
import { IdempotencyEngine } from '../../lib/core/engine.js';
import { isResolvedPolicy, resolvePolicy } from '../../lib/core/policy.js';
import { resolveHandlerConfig, validateModuleOptions } from '../../lib/nest/handler-config.js';
import { IdempotencyService } from '../../lib/nest/idempotency.service.js';
import type { IdempotentOptions } from '../../lib/nest/idempotency.options.js';
import type { MethodHandlerConfig } from '../../lib/nest/transports/method/method.adapter.js';
import { transportFor } from '../../lib/nest/transports/registry.js';
import type { HandlerSite } from '../../lib/nest/transports/transport.js';
import { MemoryIdempotencyStore, type IdempotencyModuleOptions, type IdempotentMethodOptions } from '../../lib/index.js';

/**
 * The one configuration pipeline (`resolveHandlerConfig`): module options + a handler's
 * own, merged, checked by its transport's rules and the shared ones, with its policy
 * resolved once and its transport's own fields. The explorer runs it at boot, the runtime
 * at a handler's first request or call: these are its rules, without an application.
 */
@Controller('orders')
class OrdersController {
  @Post()
  create(): void {}
}

class OrderMessages {
  @MessagePattern('order.create')
  create(): void {}

  @MessagePattern('order.nats', NestTransport.NATS)
  onNats(): void {}
}

@Resolver()
class OrdersResolver {
  @Mutation(() => Boolean)
  refund(): boolean {
    return true;
  }

  @Query(() => Boolean)
  order(): boolean {
    return true;
  }
}

@Processor('refunds')
class RefundsProcessor extends WorkerHost {
  async process(): Promise<void> {}
}

class Jobs {
  @Cron('0 2 * * *', { name: 'nightly' })
  nightly(): void {}
}

class RefundService {
  refund(): void {}
}

function siteOf(owner: Function, propertyName: string): HandlerSite {
  const method = (owner.prototype as Record<string, Function>)[propertyName];
  return { method, owner, propertyName, handlerName: `${owner.name}.${propertyName}` };
}

function configOf(
  moduleOptions: IdempotencyModuleOptions,
  owner: Function,
  propertyName: string,
  own: IdempotentOptions | IdempotentMethodOptions = {},
) {
  const service = new IdempotencyService(moduleOptions);
  const site = siteOf(owner, propertyName);
  return resolveHandlerConfig(service, transportFor(site), site, own as IdempotentOptions);
}

describe('handler config resolution (the one pipeline)', () => {
  it('hands each method to the first transport of the registry that recognises it', () => {
    expect(transportFor(siteOf(OrdersController, 'create')).name).toBe('http');
    expect(transportFor(siteOf(OrderMessages, 'create')).name).toBe('rpc');
    expect(transportFor(siteOf(OrdersResolver, 'refund')).name).toBe('graphql');
    expect(transportFor(siteOf(OrdersResolver, 'order')).name).toBe('graphql');
    expect(transportFor(siteOf(RefundsProcessor, 'process')).name).toBe('bullmq');
    expect(transportFor(siteOf(Jobs, 'nightly')).name).toBe('schedule');
    expect(transportFor(siteOf(RefundService, 'refund')).name).toBe('method');
  });

  it("merges the handler's options over the module's, never the module's own settings", () => {
    const onEvent = jest.fn();
    const config = configOf({ ttl: 60_000, leaseTtl: 5_000, onEvent, enabled: true, logger: false }, OrdersController, 'create', {
      ttl: 120_000,
      required: false,
    });
    expect(config.handlerName).toBe('OrdersController.create');
    expect(config.options).toMatchObject({ ttl: 120_000, leaseTtl: 5_000, required: false });
    for (const name of ['onEvent', 'enabled', 'logger', 'runtime']) expect(config.options).not.toHaveProperty(name);
    expect(config.required).toBe(false);
  });

  it('resolves the policy once: handler over module over library defaults, the transport choosing inFlight', () => {
    const store = new MemoryIdempotencyStore();
    const http = configOf({ ttl: 60_000, waitTimeout: 2_000 }, OrdersController, 'create', { store, maxResponseBytes: 4096 });
    expect(http.policy).toMatchObject({
      store,
      ttl: 60_000,
      leaseTtl: 30_000,
      inFlight: 'reject',
      waitTimeout: 2_000,
      onStoreError: 'fail-closed',
      maxResponseBytes: 4096,
      handler: 'OrdersController.create',
    });
    expect(isResolvedPolicy(http.policy)).toBe(true);
    expect(configOf({}, OrderMessages, 'create').policy.inFlight).toBe('wait');
    expect(configOf({}, Jobs, 'nightly').policy.inFlight).toBe('reject');
    expect(configOf({ inFlight: 'wait' }, OrdersController, 'create').policy.inFlight).toBe('wait');
  });

  it("resolves cacheErrors into the policy once: the handler's predicate, or a selector and the classes of a list", () => {
    const cacheErrors = jest.fn((error: unknown) => error instanceof RangeError);
    const config = configOf({}, OrdersController, 'create', { cacheErrors });
    expect(config.policy.cacheErrors?.(new RangeError('x'))).toBe(true);
    expect(config.policy.cacheErrors?.(new Error('x'))).toBe(false);
    expect(cacheErrors).toHaveBeenCalledTimes(2);
    expect(config.policy.errorClasses).toBeUndefined();
    const listed = configOf({}, OrdersController, 'create', { cacheErrors: [RangeError] }).policy;
    expect([listed.cacheErrors?.(new RangeError('x')), listed.cacheErrors?.(new Error('x'))]).toEqual([true, false]);
    expect(listed.errorClasses).toEqual([RangeError]);
    expect(configOf({}, OrdersController, 'create').policy.cacheErrors).toBeUndefined();
  });

  it('gives each transport its own fields: key headers on HTTP, RPC and GraphQL, replayed headers on HTTP only', () => {
    const http = configOf({ header: 'X-Request-Key' }, OrdersController, 'create', { replayHeaders: ['X-Trace'] });
    expect(http.keyHeaders).toEqual(['x-request-key', 'x-idempotency-key']);
    expect([...http.replayHeaders]).toEqual(expect.arrayContaining(['content-type', 'location', 'etag', 'x-trace']));
    expect(configOf({ header: 'X-Idempotency-Key' }, OrderMessages, 'create').keyHeaders).toEqual(['x-idempotency-key', 'idempotency-key']);
    expect(configOf({}, OrderMessages, 'create').replayHeaders.size).toBe(0);
    expect(configOf({}, OrdersResolver, 'refund').keyHeaders).toEqual(['idempotency-key', 'x-idempotency-key']);
  });

  it("applies each transport's own boot rules", () => {
    expect(() => configOf({}, OrdersController, 'create', { ack: true })).toThrow(
      /@Idempotent\(\) on OrdersController\.create: ack: true acknowledges broker messages, and this is an HTTP route/,
    );
    expect(() => configOf({}, OrdersResolver, 'order')).toThrow(/OrdersResolver\.order: it is a GraphQL query/);
    expect(() => configOf({}, OrdersResolver, 'refund', { ack: true })).toThrow(/this is a GraphQL mutation/);
    expect(() => configOf({}, OrderMessages, 'onNats', { ack: true })).toThrow(/bound to NATS/);
    // A module-wide ack is meant for the RabbitMQ consumers of a hybrid application.
    expect(() => configOf({ ack: true }, OrdersController, 'create')).not.toThrow();
  });

  it('applies the rules of every handler after the merge, naming the handler', () => {
    expect(() => configOf({}, OrdersController, 'create', { ttl: 1.5 })).toThrow(
      /@Idempotent\(\) on OrdersController\.create: ttl must be a whole number of milliseconds above 0, got 1\.5/,
    );
    expect(() => configOf({ leaseTtl: 60_000 }, OrdersController, 'create', { ttl: 30_000 })).toThrow(
      /leaseTtl \(60000 ms\) is longer than ttl/,
    );
    // Handlers want a wait above 0; the engine (and makeIdempotent) take 0.
    expect(() => configOf({}, OrderMessages, 'create', { waitTimeout: 0 })).toThrow(
      /waitTimeout must be a whole number of milliseconds above 0/,
    );
    expect(() => validateModuleOptions(new IdempotencyService({ ttl: -1 }))).toThrow(/IdempotencyModule\.forRoot\(\): ttl must be/);
  });

  it("gives a method without a request its own options only (the module's request options are not inherited)", () => {
    const moduleKey = jest.fn(() => 'from-the-request');
    const key = jest.fn((refund: { id: string }) => refund.id);
    const config = configOf({ key: moduleKey, header: 'X-Key', ttl: 60_000 }, RefundService, 'refund', {
      key,
      scope: 'refunds.refund',
    }) as MethodHandlerConfig;
    expect(config.operation).toBe('refunds.refund');
    expect(config.options).not.toHaveProperty('header');
    expect(config.options.ttl).toBe(60_000);
    expect(config.keyHeaders).toEqual([]);
    expect(config.options.key?.({ getArgs: () => [{ id: 'r-1' }] } as never)).toBe('r-1');
    expect(moduleKey).not.toHaveBeenCalled();
    expect(() => configOf({}, RefundService, 'refund')).toThrow(
      /RefundService\.refund \(a provider method\) has no request to read an idempotency key from/,
    );
    expect(() => configOf({}, RefundService, 'refund', { key: () => 'k', header: 'X-Key' } as IdempotentOptions)).toThrow(
      /header does not apply to RefundService\.refund \(a provider method\)/,
    );
  });

  it('gives jobs and schedules their default operation and fingerprint', () => {
    const job = configOf({}, RefundsProcessor, 'process') as MethodHandlerConfig;
    expect(job.operation).toBe('bullmq refunds');
    const tick = configOf({}, Jobs, 'nightly') as MethodHandlerConfig;
    expect(tick.operation).toBe('cron nightly');
    expect(tick.options.fingerprint).toBe(false);
  });
});

describe('resolvePolicy (lib/core/policy.ts)', () => {
  it('is checked once, when resolved: the engine takes it as it is and checks only a policy built by hand', async () => {
    const store = new MemoryIdempotencyStore();
    expect(() => resolvePolicy('pay', { waitTimeout: Number.NaN }, { store })).toThrow(/IdempotencyEngine: waitTimeout must be/);
    const policy = resolvePolicy('pay', { ttl: 1000 }, { store, ttl: 5000, leaseTtl: 500 });
    expect(policy).toMatchObject({ ttl: 1000, leaseTtl: 500, inFlight: 'wait', waitTimeout: 10_000, handler: 'pay' });
    const engine = new IdempotencyEngine();
    expect(await engine.execute({ key: 'policy-once' }, policy, () => 'paid')).toEqual({ value: 'paid', replayed: false });
    await expect(engine.execute({ key: 'by-hand' }, { ...policy, waitTimeout: Number.NaN }, () => 1)).rejects.toThrow(
      /IdempotencyEngine: waitTimeout must be/,
    );
  });
});
