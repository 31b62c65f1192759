import { Controller, Injectable, Module, Post, type INestApplicationContext, type Type } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Test } from '@nestjs/testing';
import type Redis from 'ioredis';
import {
  Idempotent,
  IdempotencyConfigurationError,
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyModule,
  IdempotencyService,
  MemoryIdempotencyStore,
  type IdempotencyEvent,
  type IdempotencyModuleOptions,
} from '../../lib/index.js';
import { RedisIdempotencyStore } from '../../lib/redis/index.js';
import { IdempotencyTestingModule } from '../../lib/testing/index.js';
import { Effects } from '../support/effects.js';
import { Gate, deleteKeys, redisClient, runPrefix, until } from './support.js';

/**
 * `@Idempotent({ key })` on a method of a provider, called by the application's own
 * code: the protocol of makeIdempotent with the module's store and policy.
 */

interface RefundRequest {
  id: string;
  amount: number;
}

const effects = new Effects();
let gate: Gate | undefined;

@Injectable()
class RefundService {
  @Idempotent({ key: (refund: RefundRequest) => refund.id })
  async refund(refund: RefundRequest): Promise<{ refundId: string; amount: number; n: number }> {
    const n = effects.hit(refund.id);
    await gate?.passed;
    return { refundId: `re_${refund.id}`, amount: refund.amount, n };
  }

  @Idempotent({ key: (id: string) => id, inFlight: 'reject' })
  async rejectWhileRunning(id: string): Promise<number> {
    const n = effects.hit(id);
    await gate?.passed;
    return n;
  }

  @Idempotent({ key: (id: string) => id })
  async failFirst(id: string): Promise<number> {
    const n = effects.hit(id);
    if (n === 1) throw new Error('card declined');
    return n;
  }

  @Idempotent({ key: (id: string) => id, cacheErrors: (error) => error instanceof RangeError })
  async cachedFailure(id: string): Promise<number> {
    effects.hit(id);
    throw new RangeError(`amount out of range (${id})`);
  }

  @Idempotent({ key: (id: string) => id, scope: 'refunds-v1' })
  async renamed(id: string): Promise<string> {
    effects.hit(id);
    return `done ${id}`;
  }
}

@Controller('refunds')
class RefundsController {
  @Post()
  @Idempotent()
  create() {
    return { n: effects.hit('controller') };
  }
}

async function start(options: IdempotencyModuleOptions, providers: Type<unknown>[] = [RefundService]): Promise<INestApplicationContext> {
  @Module({ imports: [IdempotencyModule.forRoot({ logger: false, ...options })], providers })
  class AppModule {}
  return NestFactory.createApplicationContext(AppModule, { logger: false });
}

const unique = (() => {
  let n = 0;
  return (name: string) => `${name}-${process.pid}-${++n}`;
})();

describe('@Idempotent({ key }) on a provider method (memory store)', () => {
  let app: INestApplicationContext;
  let service: RefundService;
  const events: IdempotencyEvent[] = [];

  beforeAll(async () => {
    app = await start({ store: new MemoryIdempotencyStore(), onEvent: (event) => events.push(event) });
    service = app.get(RefundService);
  });
  afterAll(async () => {
    await app?.close();
  });
  afterEach(() => {
    gate?.open();
    gate = undefined;
  });

  it('runs the effect once for many concurrent calls with one key, and every caller gets its result', async () => {
    const id = unique('concurrent');
    gate = new Gate();
    const calls = Array.from({ length: 25 }, () => service.refund({ id, amount: 10 }));
    await until('the first call to run', () => effects.count(id) === 1);
    gate.open();
    const answers = await Promise.all(calls);
    for (const answer of answers) expect(answer).toEqual({ refundId: `re_${id}`, amount: 10, n: 1 });
    expect(effects.count(id)).toBe(1);
    // Later: the stored result, the method does not run.
    expect(await service.refund({ id, amount: 10 })).toEqual({ refundId: `re_${id}`, amount: 10, n: 1 });
    expect(effects.count(id)).toBe(1);
  });

  it('scopes keys by provider and method, `method RefundService.refund`', async () => {
    const id = unique('scope');
    await service.refund({ id, amount: 3 });
    const idempotency = app.get(IdempotencyService);
    const record = await idempotency.inspect(id, { operation: 'method RefundService.refund' });
    expect(record?.status).toBe('completed');
    expect(events.some((event) => event.handler === 'RefundService.refund' && event.type === 'claimed')).toBe(true);
    // The same key on another method is another operation.
    await service.renamed(id);
    expect(effects.count(id)).toBe(2);
    expect((await idempotency.inspect(id, { operation: 'refunds-v1' }))?.status).toBe('completed');
  });

  it('refuses the same key with other arguments (the fingerprint is the arguments)', async () => {
    const id = unique('mismatch');
    await service.refund({ id, amount: 10 });
    await expect(service.refund({ id, amount: 99 })).rejects.toBeInstanceOf(IdempotencyFingerprintMismatchError);
    expect(effects.count(id)).toBe(1);
  });

  it("inFlight: 'reject' refuses a duplicate while the first runs", async () => {
    const id = unique('reject');
    gate = new Gate();
    const first = service.rejectWhileRunning(id);
    await until('the first call to run', () => effects.count(id) === 1);
    await expect(service.rejectWhileRunning(id)).rejects.toBeInstanceOf(IdempotencyInFlightError);
    gate.open();
    expect(await first).toBe(1);
    expect(effects.count(id)).toBe(1);
  });

  it('releases the key when the method throws, so a retry runs it again', async () => {
    const id = unique('retry');
    await expect(service.failFirst(id)).rejects.toThrow('card declined');
    expect(await service.failFirst(id)).toBe(2);
    expect(await service.failFirst(id)).toBe(2);
    expect(effects.count(id)).toBe(2);
  });

  it('stores an error cacheErrors selects and throws it again to duplicates', async () => {
    const id = unique('cached');
    await expect(service.cachedFailure(id)).rejects.toThrow(`amount out of range (${id})`);
    await expect(service.cachedFailure(id)).rejects.toThrow(`amount out of range (${id})`);
    expect(effects.count(id)).toBe(1);
  });

  it('refuses a controller route called directly by your code: it has no request, so no key', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyModule.forRoot({ logger: false })],
      controllers: [RefundsController],
    }).compile();
    const before = effects.count('controller');
    expect(() => moduleRef.get(RefundsController).create()).toThrow(/RefundsController\.create: this request handler was called directly/);
    expect(effects.count('controller')).toBe(before);
    await moduleRef.close();
  });

  it('runs a directly called route as written when IdempotencyTestingModule switches idempotency off', async () => {
    const moduleRef = await Test.createTestingModule({
      imports: [IdempotencyTestingModule.forRoot()],
      controllers: [RefundsController],
    }).compile();
    const before = effects.count('controller');
    expect(moduleRef.get(RefundsController).create()).toEqual({ n: before + 1 });
    await moduleRef.close();
  });

  it('refuses a provider instance that Nest did not create (no module, never unprotected)', async () => {
    const id = unique('new');
    await expect(new RefundService().refund({ id, amount: 1 })).rejects.toThrow(/cannot find IdempotencyModule/);
    expect(effects.count(id)).toBe(0);
  });
});

describe('@Idempotent() on provider methods: boot-time validation', () => {
  it('refuses a provider method without a key, saying how to fix it', async () => {
    @Injectable()
    class NoKeyService {
      @Idempotent()
      async charge(orderId: string) {
        return orderId;
      }
    }
    const boot = start({}, [NoKeyService]);
    await expect(boot).rejects.toBeInstanceOf(IdempotencyConfigurationError);
    await expect(boot).rejects.toThrow(
      /NoKeyService\.charge \(a provider method\) has no request to read an idempotency key from, so it needs a key option/,
    );
    await expect(boot).rejects.toMatchObject({ hint: expect.stringMatching(/@Idempotent\(\{ key: /) });
  });

  it.each([
    ['header', { header: 'X-Key' }, /header does not apply to .*HTTP request/],
    ['replayHeaders', { replayHeaders: ['etag'] }, /replayHeaders does not apply/],
    ['ack', { ack: true }, /ack does not apply to .*RabbitMQ delivery/],
    ['a scope function', { scope: () => 'tenant' }, /scope on .* is the name of its operation .*got a function/],
    ['a key that is no function', { key: 'id' }, /key must be a function of the method's arguments/],
    ['leaseTtl above ttl', { ttl: 1_000, leaseTtl: 5_000 }, /leaseTtl \(5000 ms\) is longer than ttl/],
  ])('refuses %s on a provider method', async (_label, extra, message) => {
    @Injectable()
    class WrongService {
      @Idempotent({ key: (id: string) => id, ...(extra as object) })
      async charge(id: string) {
        return id;
      }
    }
    await expect(start({}, [WrongService])).rejects.toThrow(message);
  });

  it('refuses a provider whose module does not import IdempotencyModule', async () => {
    @Injectable()
    class Lonely {
      @Idempotent({ key: (id: string) => id })
      async charge(id: string) {
        return id;
      }
    }
    @Module({ providers: [Lonely] })
    class FeatureModule {}
    @Module({ imports: [FeatureModule, IdempotencyModule.forRoot({ logger: false })] })
    class AppModule {}
    await expect(NestFactory.createApplicationContext(AppModule, { logger: false })).rejects.toThrow(
      /Lonely\.charge cannot find IdempotencyModule/,
    );
  });

  it("does not give provider methods the module's request options (a module-wide key reads a request)", async () => {
    const app = await start({ key: () => 'same-for-every-request', header: 'X-Key', fingerprint: false });
    try {
      const service = app.get(RefundService);
      const a = unique('module-key');
      const b = unique('module-key');
      await service.refund({ id: a, amount: 1 });
      await service.refund({ id: b, amount: 1 });
      expect(effects.count(a)).toBe(1);
      expect(effects.count(b)).toBe(1);
    } finally {
      await app.close();
    }
  });

  it('runs the method as written when the module is disabled (enabled: false)', async () => {
    const app = await start({ enabled: false });
    try {
      const id = unique('disabled');
      await app.get(RefundService).refund({ id, amount: 1 });
      await app.get(RefundService).refund({ id, amount: 1 });
      expect(effects.count(id)).toBe(2);
    } finally {
      await app.close();
    }
  });
});

describe('@Idempotent({ key }) on a provider method: two applications sharing Redis', () => {
  const prefix = runPrefix('methods');
  let redis: Redis;
  const apps: INestApplicationContext[] = [];
  const clients: Redis[] = [];

  beforeAll(async () => {
    redis = redisClient();
    for (let i = 0; i < 2; i++) {
      const client = redisClient();
      clients.push(client);
      apps.push(await start({ store: new RedisIdempotencyStore(client, { prefix: `${prefix}:idem:` }) }));
    }
  });
  afterAll(async () => {
    gate?.open();
    for (const app of apps) await app.close();
    for (const client of clients) client.disconnect();
    await deleteKeys(redis, prefix);
    redis.disconnect();
  });

  it('runs once across both applications for many concurrent calls with one key', async () => {
    const id = unique('shared');
    gate = new Gate();
    const calls = apps.flatMap((app) => Array.from({ length: 10 }, () => app.get(RefundService).refund({ id, amount: 5 })));
    await until('one call to run', () => effects.count(id) === 1);
    gate.open();
    const answers = await Promise.all(calls);
    for (const answer of answers) expect(answer).toEqual({ refundId: `re_${id}`, amount: 5, n: 1 });
    expect(effects.count(id)).toBe(1);
  });
});
