import { Inject, Injectable, Module, Scope, type DynamicModule, type INestApplicationContext, type Type } from '@nestjs/common';
import { ContextIdFactory, NestFactory } from '@nestjs/core';
import {
  Idempotent,
  IdempotencyConfigurationError,
  IdempotencyModule,
  IdempotencyService,
  MemoryIdempotencyStore,
} from '../../lib/index.js';
import { Effects } from '../support/effects.js';

/**
 * The scope of a provider method's keys (issue 24, item 5): `method <Class>.<method>` by
 * default, and two methods that would share it without saying so (two classes of one
 * name, one class provided twice) stop the boot, so that one can never answer with the
 * other's stored result.
 */

const effects = new Effects();
let serial = 0;
const unique = (name: string) => `${name}-${process.pid}-${++serial}`;

/** A class named `name`, as two feature modules (or a minifier) can make them; `scope` pins its operation. */
function refundServiceClass(tag: string, name = 'RefundService', scope?: string): Type<{ refund(id: string): Promise<string> }> {
  @Injectable()
  class Service {
    @Idempotent({ key: (id: string) => id, ...(scope === undefined ? {} : { scope }) })
    async refund(id: string): Promise<string> {
      effects.hit(`${tag}:${id}`);
      return `${tag} refunded ${id}`;
    }
  }
  Object.defineProperty(Service, 'name', { value: name });
  return Service;
}

function featureModule(
  name: string,
  providers: DynamicModule['providers'],
  exports: DynamicModule['exports'] = [],
  imports: DynamicModule['imports'] = [],
): DynamicModule {
  class Feature {}
  Object.defineProperty(Feature, 'name', { value: name });
  Module({})(Feature);
  return { module: Feature, providers, exports, imports };
}

async function boot(
  imports: Array<Type<unknown> | DynamicModule>,
  providers: DynamicModule['providers'] = [],
): Promise<INestApplicationContext> {
  @Module({
    imports: [IdempotencyModule.forRoot({ isGlobal: true, logger: false, store: new MemoryIdempotencyStore() }), ...imports],
    providers,
  })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: false, abortOnError: false });
}

describe('@Idempotent() provider methods: one operation per method', () => {
  it.each([
    ['two feature modules with a RefundService each', 'RefundService'],
    ["a minifier's short class names", 'e'],
  ])('refuses at boot two classes whose default scopes meet (%s), naming both and the fix', async (_label, name) => {
    const Shop = refundServiceClass('shop', name);
    const Billing = refundServiceClass('billing', name);
    const boot$ = boot([featureModule('ShopModule', [Shop], [Shop]), featureModule('BillingModule', [Billing], [Billing])]);
    await expect(boot$).rejects.toBeInstanceOf(IdempotencyConfigurationError);
    await expect(boot$).rejects.toThrow(
      `@Idempotent() on ${name}.refund (${name} in ShopModule) and ${name}.refund (${name} in BillingModule) would share one key space, 'method ${name}.refund'`,
    );
    await expect(boot$).rejects.toMatchObject({
      hint: expect.stringMatching(/Give each its own scope: .*scope: 'shop\.refund'.*'billing\.refund'/),
    });
  });

  it('runs each of two same-named classes once per key when both name their scope, and keeps their records apart', async () => {
    const Shop = refundServiceClass('shop', 'RefundService', 'shop.refunds');
    const Billing = refundServiceClass('billing', 'RefundService', 'billing.refunds');
    const app = await boot([featureModule('ShopModule', [Shop], [Shop]), featureModule('BillingModule', [Billing], [Billing])]);
    try {
      const id = unique('pinned');
      expect(await app.get(Shop).refund(id)).toBe(`shop refunded ${id}`);
      expect(await app.get(Billing).refund(id)).toBe(`billing refunded ${id}`);
      expect(await app.get(Billing).refund(id)).toBe(`billing refunded ${id}`);
      expect([effects.count(`shop:${id}`), effects.count(`billing:${id}`)]).toEqual([1, 1]);
      const idempotency = app.get(IdempotencyService);
      expect((await idempotency.inspect(id, { operation: 'shop.refunds' }))?.status).toBe('completed');
      expect((await idempotency.inspect(id, { operation: 'billing.refunds' }))?.status).toBe('completed');
      expect(await idempotency.inspect(id, { operation: 'method RefundService.refund' })).toBeUndefined();
    } finally {
      await app.close();
    }
  });

  it("refuses a scope that is another method's default scope (the other one would still use it)", async () => {
    const Renamed = refundServiceClass('renamed', 'RefundsService', 'method RefundService.refund');
    const Original = refundServiceClass('original', 'RefundService');
    await expect(boot([featureModule('ShopModule', [Renamed]), featureModule('BillingModule', [Original])])).rejects.toThrow(
      /RefundsService\.refund names 'method RefundService\.refund' as its scope, which is the default scope of RefundService\.refund/,
    );
  });

  it('lets a renamed class keep its old records with the old default as its scope', async () => {
    const store = new MemoryIdempotencyStore();
    const id = unique('rename');
    const start = async (Service: Type<{ refund(id: string): Promise<string> }>) => {
      @Module({ imports: [IdempotencyModule.forRoot({ logger: false, store })], providers: [Service] })
      class AppModule {}
      const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
      try {
        return await app.get(Service).refund(id);
      } finally {
        await app.close();
      }
    };
    expect(await start(refundServiceClass('v1', 'RefundService'))).toBe(`v1 refunded ${id}`);
    expect(await start(refundServiceClass('v2', 'RefundsService', 'method RefundService.refund'))).toBe(`v1 refunded ${id}`);
    expect(effects.count(`v2:${id}`)).toBe(0);
  });

  it('refuses one class provided twice (useClass under two tokens): two instances under one default scope', async () => {
    const Service = refundServiceClass('twice');
    const boot$ = boot([featureModule('PaymentsModule', [Service, { provide: 'LEGACY_REFUNDS', useClass: Service }])]);
    await expect(boot$).rejects.toThrow(
      "@Idempotent() on RefundService.refund (RefundService in PaymentsModule) and RefundService.refund ('LEGACY_REFUNDS' in PaymentsModule) would share one key space",
    );
    await expect(boot$).rejects.toThrow(/They are one class provided twice/);
    await expect(boot$).rejects.toMatchObject({ hint: expect.stringMatching(/provide RefundService once and export it/) });
  });

  it('refuses one class declared in two feature modules (two instances), as dynamic forFeature() modules do', async () => {
    const Service = refundServiceClass('feature');
    await expect(boot([featureModule('StripeModule', [Service]), featureModule('PaypalModule', [Service])])).rejects.toThrow(
      /RefundService in StripeModule\) and RefundService\.refund \(RefundService in PaypalModule\) would share one key space/,
    );
  });

  it('lets one class provided twice share its keys when its method names a scope', async () => {
    const Service = refundServiceClass('shared', 'RefundService', 'refunds');
    const app = await boot([
      featureModule('PaymentsModule', [Service, { provide: 'LEGACY_REFUNDS', useClass: Service }], [Service, 'LEGACY_REFUNDS']),
    ]);
    try {
      const id = unique('shared');
      await app.get(Service).refund(id);
      await app.get<{ refund(id: string): Promise<string> }>('LEGACY_REFUNDS').refund(id);
      expect(effects.count(`shared:${id}`)).toBe(1);
    } finally {
      await app.close();
    }
  });

  it('does not flag one provider exported to several modules, aliased with useExisting, or injected as a transient into two consumers', async () => {
    const Service = refundServiceClass('one');
    const Transient = refundServiceClass('transient', 'TransientRefunds');
    Injectable({ scope: Scope.TRANSIENT })(Transient);
    const Requested = refundServiceClass('request', 'RequestRefunds');
    Injectable({ scope: Scope.REQUEST })(Requested);
    @Injectable()
    class First {
      constructor(@Inject(Transient) readonly refunds: { refund(id: string): Promise<string> }) {}
    }
    @Injectable()
    class Second {
      constructor(@Inject(Transient) readonly refunds: { refund(id: string): Promise<string> }) {}
    }
    const core = featureModule(
      'CoreModule',
      [Service, { provide: 'REFUNDS', useExisting: Service }, Transient, Requested],
      [Service, 'REFUNDS', Transient],
    );
    const app = await boot([
      core,
      featureModule('ShopModule', [First], [First], [core]),
      featureModule('BillingModule', [Second], [Second], [core]),
    ]);
    try {
      const id = unique('one');
      await app.get(Service).refund(id);
      await app.get<{ refund(id: string): Promise<string> }>('REFUNDS').refund(id);
      expect(effects.count(`one:${id}`)).toBe(1);
      // Two instances of one transient provider are one provider: they share its keys.
      expect(app.get(First).refunds).not.toBe(app.get(Second).refunds);
      await app.get(First).refunds.refund(id);
      await app.get(Second).refunds.refund(id);
      expect(effects.count(`transient:${id}`)).toBe(1);
      // A request-scoped provider's instances, one per request, share its keys too.
      const a = await app.resolve(Requested, ContextIdFactory.create());
      const b = await app.resolve(Requested, ContextIdFactory.create());
      expect(a).not.toBe(b);
      await a.refund(id);
      await b.refund(id);
      expect(effects.count(`request:${id}`)).toBe(1);
    } finally {
      await app.close();
    }
  });

  it('checks each application on its own: two applications in one process may each have a RefundService', async () => {
    const Shop = refundServiceClass('shop-app');
    const Billing = refundServiceClass('billing-app');
    const shop = await boot([featureModule('ShopModule', [Shop], [Shop])]);
    const billing = await boot([featureModule('BillingModule', [Billing], [Billing])]);
    const again = await boot([featureModule('ShopModule', [Shop], [Shop])]);
    try {
      const id = unique('apps');
      expect(await shop.get(Shop).refund(id)).toBe(`shop-app refunded ${id}`);
      expect(await billing.get(Billing).refund(id)).toBe(`billing-app refunded ${id}`);
      expect(await again.get(Shop).refund(id)).toBe(`shop-app refunded ${id}`);
    } finally {
      await Promise.all([shop.close(), billing.close(), again.close()]);
    }
  });

  it('refuses two BullMQ processors of one queue name (two connections can hold two such queues)', async () => {
    // What @Processor('refunds') of @nestjs/bullmq leaves on the class (the worker itself is not needed here).
    const processor = (tag: string) => {
      class Processor {
        @Idempotent()
        async process(job: { id: string }): Promise<string> {
          return `${tag} ${job.id}`;
        }
      }
      Object.defineProperty(Processor, 'name', { value: `${tag}Processor` });
      Reflect.defineMetadata('bullmq:processor_metadata', { name: 'refunds' }, Processor);
      Injectable()(Processor);
      return Processor;
    };
    await expect(
      boot([featureModule('ShopModule', [processor('Shop')]), featureModule('BillingModule', [processor('Billing')])]),
    ).rejects.toThrow(
      /ShopProcessor\.process .* and BillingProcessor\.process .* would share one key space, 'bullmq refunds'.*Both process a BullMQ queue named 'refunds'/,
    );
  });

  it('refuses a nameless class without a scope (its default scope would name nothing)', async () => {
    const Nameless = refundServiceClass('nameless', '');
    await expect(boot([featureModule('ShopModule', [Nameless])])).rejects.toThrow(/its class has no name, so its default scope/);
  });
});
