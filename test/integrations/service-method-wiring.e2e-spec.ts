import { EventEmitter } from 'node:events';
import { Inject, Injectable, Module, Scope, type DynamicModule, type INestApplicationContext, type Type } from '@nestjs/common';
import { ContextIdFactory, NestFactory } from '@nestjs/core';
import { Idempotent, IdempotencyConfigurationError, IdempotencyModule, MemoryIdempotencyStore } from '../../lib/index.js';
import { Effects } from '../support/effects.js';
import { until } from './support.js';

/**
 * How `@Idempotent()` provider methods reach IdempotencyModule (issue 24, item 13):
 * transient, useFactory and useValue providers work with a global module; every
 * refusal names its real cause (no import, a detached or static method, an instance
 * built with `new`) and the fix.
 */

const effects = new Effects();
let serial = 0;
const unique = (name: string) => `${name}-${process.pid}-${++serial}`;

interface Refunds {
  refund(id: string): Promise<string>;
}

function refundsClass(tag: string): Type<Refunds> {
  @Injectable()
  class RefundService {
    @Idempotent({ key: (id: string) => id })
    async refund(id: string): Promise<string> {
      effects.hit(`${tag}:${id}`);
      return `${tag} refunded ${id}`;
    }
  }
  return RefundService;
}

function featureModule(name: string, providers: DynamicModule['providers'], exports: DynamicModule['exports'] = []): DynamicModule {
  class Feature {}
  Object.defineProperty(Feature, 'name', { value: name });
  Module({})(Feature);
  return { module: Feature, providers, exports };
}

/** The root module imports IdempotencyModule with isGlobal; the providers live in a feature module. */
async function boot(feature: DynamicModule): Promise<INestApplicationContext> {
  @Module({ imports: [IdempotencyModule.forRoot({ isGlobal: true, logger: false, store: new MemoryIdempotencyStore() }), feature] })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: false, abortOnError: false });
}

/** Runs `call` twice with one key: the effect must happen once. */
async function expectProtected(tag: string, call: (id: string) => Promise<string>): Promise<void> {
  const id = unique(tag);
  expect(await call(id)).toBe(`${tag} refunded ${id}`);
  expect(await call(id)).toBe(`${tag} refunded ${id}`);
  expect(effects.count(`${tag}:${id}`)).toBe(1);
}

describe('@Idempotent() provider methods: how each kind of provider reaches IdempotencyModule', () => {
  it('serves a Scope.TRANSIENT provider (each consumer has its own instance) with a global IdempotencyModule', async () => {
    const Transient = refundsClass('transient');
    Injectable({ scope: Scope.TRANSIENT })(Transient);
    @Injectable()
    class Consumer {
      constructor(@Inject(Transient) readonly refunds: Refunds) {}
    }
    const app = await boot(featureModule('RefundsModule', [Transient, Consumer], [Consumer]));
    try {
      await expectProtected('transient', (id) => app.get(Consumer).refunds.refund(id));
    } finally {
      await app.close();
    }
  });

  it.each([
    ['useFactory', (Service: Type<Refunds>) => ({ provide: 'REFUNDS', useFactory: () => new Service() })],
    ['an async useFactory', (Service: Type<Refunds>) => ({ provide: 'REFUNDS', useFactory: async () => new Service() })],
    ['useValue', (Service: Type<Refunds>) => ({ provide: 'REFUNDS', useValue: new Service() })],
    [
      'a transient useFactory',
      (Service: Type<Refunds>) => ({ provide: 'REFUNDS', useFactory: () => new Service(), scope: Scope.TRANSIENT }),
    ],
  ])('serves an instance the application built itself (%s) with a global IdempotencyModule', async (label, provider) => {
    const tag = label.replace(/\W+/g, '-');
    const Service = refundsClass(tag);
    @Injectable()
    class Consumer {
      constructor(@Inject('REFUNDS') readonly refunds: Refunds) {}
    }
    const app = await boot(featureModule('RefundsModule', [provider(Service), Consumer], [Consumer]));
    try {
      await expectProtected(tag, (id) => app.get(Consumer).refunds.refund(id));
    } finally {
      await app.close();
    }
  });

  it('serves a request-scoped provider (built per request)', async () => {
    const Requested = refundsClass('request');
    Injectable({ scope: Scope.REQUEST })(Requested);
    const app = await boot(featureModule('RefundsModule', [Requested], [Requested]));
    try {
      await expectProtected('request', async (id) => (await app.resolve(Requested, ContextIdFactory.create())).refund(id));
    } finally {
      await app.close();
    }
  });

  it.each([
    ['a class', (Service: Type<Refunds>) => Service],
    ['a useFactory', (Service: Type<Refunds>) => ({ provide: 'REFUNDS', useFactory: () => new Service() })],
    ['a request-scoped class', (Service: Type<Refunds>) => (Injectable({ scope: Scope.REQUEST })(Service), Service)],
  ])('refuses at boot %s provider whose module cannot reach IdempotencyModule, naming that module', async (_label, provider) => {
    const Service = refundsClass('lonely');
    // IdempotencyModule is imported by the root module only, without isGlobal.
    @Module({ imports: [IdempotencyModule.forRoot({ logger: false }), featureModule('LonelyModule', [provider(Service)])] })
    class AppModule {}
    const boot$ = NestFactory.createApplicationContext(AppModule, { logger: false, abortOnError: false });
    await expect(boot$).rejects.toBeInstanceOf(IdempotencyConfigurationError);
    await expect(boot$).rejects.toThrow(
      /RefundService\.refund cannot find IdempotencyModule: .* in LonelyModule cannot reach it \(LonelyModule does not import IdempotencyModule/,
    );
    await expect(boot$).rejects.toMatchObject({ hint: expect.stringMatching(/import IdempotencyModule into LonelyModule/) });
  });

  it('refuses one useValue object that a second, still running application also provides', async () => {
    const Service = refundsClass('shared-value');
    const shared = new Service();
    const first = await boot(featureModule('RefundsModule', [{ provide: 'REFUNDS', useValue: shared }]));
    try {
      await expect(boot(featureModule('RefundsModule', [{ provide: 'REFUNDS', useValue: shared }]))).rejects.toThrow(
        /the RefundService object of 'REFUNDS' \(useValue\) in RefundsModule is already served by another IdempotencyModule/,
      );
    } finally {
      await first.close();
    }
    // Closed, the first application gives the object back: the next one serves it.
    const next = await boot(featureModule('RefundsModule', [{ provide: 'REFUNDS', useValue: shared }]));
    try {
      await expectProtected('shared-value', (id) => shared.refund(id));
    } finally {
      await next.close();
    }
  });
});

describe('@Idempotent() provider methods: calls that cannot be protected say why', () => {
  const Service = refundsClass('calls');
  let app: INestApplicationContext;
  let service: Refunds;
  beforeAll(async () => {
    app = await boot(featureModule('RefundsModule', [Service], [Service]));
    service = app.get(Service);
  });
  afterAll(async () => {
    await app?.close();
  });

  it('refuses a detached method (`const f = service.refund; f()`), saying to call it on its instance or bind it', async () => {
    const id = unique('detached');
    const refund = service.refund;
    const call = refund(id);
    await expect(call).rejects.toBeInstanceOf(IdempotencyConfigurationError);
    await expect(call).rejects.toThrow(
      /RefundService\.refund was called without its instance \(`this` is undefined\): the method was detached from the object Nest built/,
    );
    await expect(call).rejects.toMatchObject({ hint: expect.stringMatching(/service\.refund\.bind\(service\)/) });
    expect(effects.count(`calls:${id}`)).toBe(0);
  });

  it('refuses a method passed as a callback and called on another object (an EventEmitter listener)', async () => {
    const id = unique('callback');
    const emitter = new EventEmitter();
    const errors: unknown[] = [];
    emitter.on('refund', (...args: [string]) => {
      (service.refund as (this: unknown, ...a: [string]) => Promise<string>)
        .apply(emitter, args)
        .catch((error: unknown) => errors.push(error));
    });
    emitter.emit('refund', id);
    await until('the refusal', () => errors.length === 1);
    expect(String((errors[0] as Error).message)).toMatch(/RefundService\.refund was called on an EventEmitter instead of its instance/);
    expect(effects.count(`calls:${id}`)).toBe(0);
  });

  it('refuses an instance built with new, saying to get it from Nest', async () => {
    const id = unique('new');
    const call = new Service().refund(id);
    await expect(call).rejects.toThrow(
      /RefundService\.refund cannot find IdempotencyModule: this RefundService object was not built by Nest's injector/,
    );
    await expect(call).rejects.toMatchObject({ hint: expect.stringMatching(/Get the instance from Nest/) });
    expect(effects.count(`calls:${id}`)).toBe(0);
  });

  it('refuses a static method when called, and at boot on a provider class', async () => {
    class Ledger {
      @Idempotent({ key: (id: string) => id })
      static async post(id: string): Promise<string> {
        effects.hit(`static:${id}`);
        return id;
      }
    }
    const id = unique('static');
    await expect(Ledger.post(id)).rejects.toThrow(/Ledger\.post: it is a static method, which belongs to no instance Nest builds/);
    expect(effects.count(`static:${id}`)).toBe(0);

    @Injectable()
    class LedgerService {
      @Idempotent({ key: (id: string) => id })
      static async post(id: string): Promise<string> {
        return id;
      }
    }
    const boot$ = boot(featureModule('LedgerModule', [LedgerService]));
    await expect(boot$).rejects.toThrow(/LedgerService\.post: it is a static method/);
    await expect(boot$).rejects.toMatchObject({
      hint: expect.stringMatching(/Make post an instance method of an @Injectable\(\) provider/),
    });
  });
});
