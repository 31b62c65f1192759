// The defaults of issue 13, as a new user and as an attacker meet them: no replay across
// routes or users, the whole request in the fingerprint, one key per request,
// configuration mistakes at boot, and nothing lost silently.
import {
  Body,
  Controller,
  Injectable,
  Module,
  Post,
  Query,
  Version,
  VersioningType,
  type CanActivate,
  type ExecutionContext,
  type INestApplication,
  type LoggerService,
} from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { MessagePattern, Transport } from '@nestjs/microservices';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { TypeOrmIdempotencyStore } from '../../lib/typeorm/index.js';
import { pgConnection } from '../support/postgres.js';
import {
  Idempotent,
  IdempotencyConfigurationError,
  IdempotencyModule,
  IdempotencyService,
  MemoryIdempotencyStore,
  type IdempotencyEvent,
  type IdempotencyModuleOptions,
} from '../../lib/index.js';
import { Effects } from '../support/effects.js';
import { captureLogger } from '../support/capture-logger.js';

type Platform = 'express' | 'fastify';
const platforms: Platform[] = ['express', 'fastify'];

let seq = 0;
const newKey = (label: string) => `${label}-${process.pid}-${Date.now()}-${++seq}`;

/** An id object like MongoDB's ObjectId: identity through toHexString(). */
class HexId {
  constructor(private readonly hex: string) {}
  toHexString() {
    return this.hex;
  }
}
/** An id object with only a toString of its own. */
class TextId {
  constructor(private readonly text: string) {}
  toString() {
    return this.text;
  }
}

/**
 * Test authentication, shaped like real apps: `jwt:<name>` is NestJS's passport-jwt recipe
 * (`{ userId, username }`), `oid:<hex>` a MongoDB user (`{ _id: ObjectId }`),
 * `text:<id>` an id object with its own toString, `anonymous-user` a user object with no identity.
 */
@Injectable()
class AuthGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const req = context.switchToHttp().getRequest();
    const auth = req.headers['x-auth'] as string | undefined;
    if (!auth) return true;
    const [kind, id] = auth.split(':');
    if (kind === 'jwt') req.user = { userId: id, username: id };
    else if (kind === 'oid') req.user = { _id: new HexId(id), email: `${id}@example.com` };
    else if (kind === 'text') req.user = { _id: new TextId(id) };
    else if (kind === 'bytes') req.user = { id: Buffer.from(id, 'hex') };
    else if (kind === 'tenant') req.user = { id: 'someone', tenant: { name: id } };
    else req.user = { username: 'somebody', roles: ['admin'] };
    return true;
  }
}

/** A factory, as controller factories and v1/v2 folders do: every class it makes is named `PaymentsController`. */
function paymentsControllerAt(path: string, effects: Effects, version?: string) {
  @Controller({ path, version })
  class PaymentsController {
    @Post()
    @Idempotent()
    create(@Body() body: { amount?: number }) {
      return { route: `${version ?? ''}/${path}`, amount: body.amount ?? null, n: effects.hit(`${version ?? ''}/${path}`) };
    }
  }
  return PaymentsController;
}

function buildControllers(effects: Effects, gate: { wait?: Promise<void> }) {
  @Controller('pay')
  class PayController {
    @Post()
    @Idempotent()
    async pay(@Query('amount') amount: string, @Body() body: unknown, @Body('user') _u: unknown) {
      const n = effects.hit('pay');
      await gate.wait;
      return { amount, body, n };
    }

    @Post('me')
    @Idempotent()
    me(@Body() body: { amount: number }, @Query('who') _who?: string) {
      return { n: effects.hit('me'), amount: body.amount };
    }

    @Post('tenant')
    // A mistake that type-checks (getRequest() is `any`): the tenant object, not its id.
    @Idempotent({ scope: (ctx) => ctx.switchToHttp().getRequest().user?.tenant })
    tenant(@Body() body: { amount: number }) {
      return { n: effects.hit('tenant'), amount: body.amount };
    }

    @Post('webhook')
    @Idempotent({ key: (ctx) => ctx.switchToHttp().getRequest().body?.eventId })
    webhook(@Body() body: { eventId: string }) {
      return { n: effects.hit('webhook'), eventId: body.eventId };
    }
  }
  return [
    paymentsControllerAt('invoices', effects),
    paymentsControllerAt('refunds', effects),
    paymentsControllerAt('refunds', effects, '2'),
    PayController,
  ];
}

async function createApp(
  platform: Platform,
  controllers: Function[],
  module: IdempotencyModuleOptions = {},
  logger: LoggerService | false = false,
  prepare?: (app: INestApplication) => void,
): Promise<INestApplication> {
  @Module({
    imports: [IdempotencyModule.forRoot(module)],
    controllers: controllers as never[],
    providers: [{ provide: APP_GUARD, useClass: AuthGuard }],
  })
  class AppModule {}
  const app =
    platform === 'fastify'
      ? await NestFactory.create(AppModule, new FastifyAdapter(), { logger })
      : await NestFactory.create(AppModule, { logger });
  prepare?.(app);
  try {
    await app.init();
  } catch (error) {
    await app.close();
    throw error;
  }
  if (platform === 'fastify') await (app.getHttpAdapter().getInstance() as { ready(): Promise<void> }).ready();
  return app;
}

describe.each(platforms)('safe defaults on %s', (platform) => {
  const effects = new Effects();
  const gate: { wait?: Promise<void> } = {};
  let app: INestApplication;
  const server = () => app.getHttpServer();
  /** The module's log: where a configuration error's details go (the answer carries its code only). */
  const logged: string[] = [];
  const inLog = (pattern: RegExp) => logged.some((line) => line.startsWith('error ') && pattern.test(line));

  beforeAll(async () => {
    app = await createApp(platform, buildControllers(effects, gate), { logger: captureLogger(logged) }, false, (a) => {
      a.setGlobalPrefix('api');
      a.enableVersioning({ type: VersioningType.URI });
    });
  });
  afterAll(async () => {
    await app?.close();
  });

  it('two same-named controllers on two routes run once each: a key never crosses routes', async () => {
    const key = newKey('routes');
    const invoices = effects.count('/invoices');
    const refunds = effects.count('/refunds');
    const invoice = await request(server()).post('/api/invoices').set('Idempotency-Key', key).send({ amount: 5 });
    const refund = await request(server()).post('/api/refunds').set('Idempotency-Key', key).send({ amount: 5 });
    expect(invoice.status).toBe(201);
    expect(refund.status).toBe(201);
    expect(refund.headers['idempotent-replayed']).toBeUndefined();
    expect(refund.body.route).toBe('/refunds');
    expect(effects.count('/invoices') - invoices).toBe(1);
    expect(effects.count('/refunds') - refunds).toBe(1);
    // Each route replays its own answer.
    const again = await request(server()).post('/api/refunds').set('Idempotency-Key', key).send({ amount: 5 });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(refund.body);
  });

  it('the version is part of the operation: v1 and v2 of a route keep their own keys', async () => {
    const key = newKey('versions');
    const v2 = await request(server()).post('/api/v2/refunds').set('Idempotency-Key', key).send({ amount: 7 });
    const unversioned = await request(server()).post('/api/refunds').set('Idempotency-Key', key).send({ amount: 7 });
    expect(v2.status).toBe(201);
    expect(v2.body.route).toBe('2/refunds');
    expect(unversioned.headers['idempotent-replayed']).toBeUndefined();
    expect(unversioned.body.route).toBe('/refunds');
  });

  it('names the operation as served: method and full route template (support tooling finds the record by it)', async () => {
    const key = newKey('operation');
    await request(server()).post('/api/v2/refunds').set('Idempotency-Key', key).send({ amount: 1 }).expect(201);
    const service = app.get(IdempotencyService);
    expect(await service.inspect(key, { operation: 'POST /api/v2/refunds' })).toMatchObject({ status: 'completed' });
    expect(await service.inspect(key, { operation: 'POST /api/refunds' })).toBeUndefined();
  });

  it.each([
    ['a passport-jwt user ({ userId })', 'jwt:alice', 'jwt:bob'],
    ['a MongoDB user ({ _id: ObjectId })', 'oid:64b7f0c2a1', 'oid:64b7f0c2b2'],
    ['an id object with its own toString', 'text:u-1', 'text:u-2'],
    // Bytes invalid in UTF-8 would decode to the same U+FFFD text: ids are compared as bytes.
    ['a Buffer id (BINARY(16) UUID)', 'bytes:8f1c2a7e00000000000000000000005a', 'bytes:9e1c2a7e00000000000000000000005a'],
  ])('%s never receives another user’s response', async (_label, alice, bob) => {
    const key = newKey('principal');
    const before = effects.count('me');
    const first = await request(server()).post('/api/pay/me').set('x-auth', alice).set('Idempotency-Key', key).send({ amount: 10 });
    const other = await request(server()).post('/api/pay/me').set('x-auth', bob).set('Idempotency-Key', key).send({ amount: 10 });
    expect(first.status).toBe(201);
    expect(other.status).toBe(201);
    expect(other.headers['idempotent-replayed']).toBeUndefined();
    expect(effects.count('me') - before).toBe(2);
    const replay = await request(server()).post('/api/pay/me').set('x-auth', alice).set('Idempotency-Key', key).send({ amount: 10 });
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.body).toEqual(first.body);
  });

  it('refuses a user whose identity it cannot read, instead of treating it as anonymous', async () => {
    const key = newKey('no-identity');
    const before = effects.count('me');
    // An anonymous request stores a response under the key...
    await request(server()).post('/api/pay/me').set('Idempotency-Key', key).send({ amount: 1 }).expect(201);
    // ...which a signed-in user without a readable id must not receive.
    const r = await request(server()).post('/api/pay/me').set('x-auth', 'opaque').set('Idempotency-Key', key).send({ amount: 1 });
    expect(r.status).toBe(500);
    expect(r.body).toMatchObject({ code: 'IDEMPOTENCY_CONFIGURATION_ERROR', status: 500, hint: 'The details are in the server log.' });
    // The fix is the server's to read: in its log, not in the answer.
    expect(r.text).not.toMatch(/scope/);
    expect(inLog(/scope: \(ctx\) =>/)).toBe(true);
    expect(r.headers['idempotent-replayed']).toBeUndefined();
    expect(effects.count('me') - before).toBe(1);
  });

  it('refuses a scope option that returns an object instead of an id', async () => {
    const before = effects.count('tenant');
    const r = await request(server())
      .post('/api/pay/tenant')
      .set('x-auth', 'tenant:t1')
      .set('Idempotency-Key', newKey('tenant'))
      .send({ amount: 1 });
    expect(r.status).toBe(500);
    expect(r.body.code).toBe('IDEMPOTENCY_CONFIGURATION_ERROR');
    expect(r.text).not.toMatch(/scope option returned an object without an id/);
    expect(inLog(/scope option returned an object without an id/)).toBe(true);
    expect(effects.count('tenant')).toBe(before);
  });

  it('takes keys from the body as they are: quotes and commas are part of them, not header syntax', async () => {
    const id = newKey('evt');
    const quoted = await request(server())
      .post('/api/pay/webhook')
      .send({ eventId: `"${id}` });
    const plain = await request(server()).post('/api/pay/webhook').send({ eventId: id });
    const comma = await request(server())
      .post('/api/pay/webhook')
      .send({ eventId: `${id},1` });
    expect([quoted.status, plain.status, comma.status]).toEqual([201, 201, 201]);
    expect(new Set([quoted.body.n, plain.body.n, comma.body.n]).size).toBe(3);
    const again = await request(server())
      .post('/api/pay/webhook')
      .send({ eventId: `"${id}` });
    expect(again.headers['idempotent-replayed']).toBe('true');
  });

  it('the query string is part of the fingerprint', async () => {
    gate.wait = undefined;
    const key = newKey('query');
    await request(server()).post('/api/pay?amount=1').set('Idempotency-Key', key).send({}).expect(201);
    const other = await request(server()).post('/api/pay?amount=1000').set('Idempotency-Key', key).send({});
    expect(other.status).toBe(422);
    expect(other.body.code).toBe('IDEMPOTENCY_FINGERPRINT_MISMATCH');
    const same = await request(server()).post('/api/pay?amount=1').set('Idempotency-Key', key).send({});
    expect(same.headers['idempotent-replayed']).toBe('true');
  });

  it('a number JSON cannot hold (1e999) does not fingerprint like null', async () => {
    const key = newKey('infinity');
    const json = (body: string) =>
      request(server()).post('/api/pay').set('Idempotency-Key', key).set('Content-Type', 'application/json').send(body);
    expect((await json('{"amount":null}')).status).toBe(201);
    const r = await json('{"amount":1e999}');
    expect(r.status).toBe(422);
    expect(r.body.code).toBe('IDEMPOTENCY_FINGERPRINT_MISMATCH');
  });

  it('a different request while the first still runs is 422, not 409', async () => {
    let open!: () => void;
    gate.wait = new Promise<void>((resolve) => (open = resolve));
    const key = newKey('in-flight');
    const before = effects.count('pay');
    const first = request(server())
      .post('/api/pay?amount=1')
      .set('Idempotency-Key', key)
      .send({})
      .then((r) => r);
    try {
      await pollUntil(() => effects.count('pay') - before === 1);
      const other = await request(server()).post('/api/pay?amount=2').set('Idempotency-Key', key).send({});
      expect(other.status).toBe(422);
      const same = await request(server()).post('/api/pay?amount=1').set('Idempotency-Key', key).send({});
      expect(same.status).toBe(409);
    } finally {
      open();
      gate.wait = undefined;
    }
    expect((await first).status).toBe(201);
  });

  it.each([
    ['two header lines', ['k1', 'k2']],
    ['two identical header lines', ['k1', 'k1']],
    ['a comma-joined list', 'k1, k2'],
    ['two quoted values', '"k1", "k2"'],
    ['an unterminated quoted key', '"q1'],
    ['a quote inside a bare key', 'q"1'],
  ])('refuses %s with 400 IDEMPOTENCY_KEY_INVALID and runs nothing', async (_label, value) => {
    const before = effects.count('me');
    const r = await request(server())
      .post('/api/pay/me')
      .set('Idempotency-Key', value as string)
      .send({ amount: 1 });
    expect(r.status).toBe(400);
    expect(r.body.code).toBe('IDEMPOTENCY_KEY_INVALID');
    expect(effects.count('me')).toBe(before);
  });

  it('refuses Idempotency-Key and X-Idempotency-Key that disagree; accepts them when they agree', async () => {
    const key = newKey('both');
    const r = await request(server())
      .post('/api/pay/me')
      .set('Idempotency-Key', key)
      .set('X-Idempotency-Key', `${key}-x`)
      .send({ amount: 1 });
    expect(r.status).toBe(400);
    expect(r.body.code).toBe('IDEMPOTENCY_KEY_INVALID');
    await request(server())
      .post('/api/pay/me')
      .set('Idempotency-Key', `"${key}"`)
      .set('X-Idempotency-Key', key)
      .send({ amount: 1 })
      .expect(201);
  });
});

async function pollUntil(condition: () => boolean, deadlineMs = 10_000): Promise<void> {
  const deadline = Date.now() + deadlineMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met before the deadline');
    await new Promise((resolve) => setImmediate(resolve));
  }
}

describe('configuration mistakes stop app.init() with the handler and the fix', () => {
  function appWith(options: Parameters<typeof Idempotent>[0], module: IdempotencyModuleOptions = {}) {
    @Controller('orders')
    class OrdersController {
      @Post()
      @Idempotent(options)
      create() {
        return { ok: true };
      }
    }
    return createApp('express', [OrdersController], module);
  }

  it.each([
    [
      'ttl: 0',
      { ttl: 0 },
      /OrdersController\.create: ttl must be a whole number of milliseconds above 0, got 0\..*Write ttl: 24 \* 60 \* 60 \* 1000 \(ms\)/,
    ],
    [
      'a fractional leaseTtl',
      { leaseTtl: 1.5 },
      /OrdersController\.create: leaseTtl must be a whole number of milliseconds above 0, got 1\.5/,
    ],
    [
      'leaseTtl above ttl',
      { ttl: 1_000, leaseTtl: 5_000 },
      /OrdersController\.create: leaseTtl \(5000 ms\) is longer than ttl \(1000 ms\)/,
    ],
    [
      'transactional without a transactional store',
      { transactional: true },
      /OrdersController\.create: transactional: true needs a store .*TypeOrmIdempotencyStore/,
    ],
    [
      'ack: true on an HTTP route',
      { ack: true },
      /OrdersController\.create: ack: true acknowledges broker messages, and this is an HTTP route/,
    ],
    ['an unknown inFlight', { inFlight: 'queue' as never }, /OrdersController\.create: inFlight must be 'reject' or 'wait'/],
    ['a store that is not one', { store: {} as never }, /OrdersController\.create: store is not an IdempotencyStore/],
  ])('%s', async (_label, options, message) => {
    const init = appWith(options);
    await expect(init).rejects.toThrow(IdempotencyConfigurationError);
    await expect(init).rejects.toThrow(message);
  });

  it('ack: true on a message handler bound to a transport without acknowledgements', async () => {
    @Controller()
    class EventsController {
      @MessagePattern('orders.created', Transport.NATS)
      @Idempotent({ ack: true, key: () => 'k' })
      created() {
        return 1;
      }
    }
    await expect(createApp('express', [EventsController])).rejects.toThrow(
      /EventsController\.created: ack: true needs a transport with manual acknowledgement, and this handler is bound to NATS/,
    );
  });

  it('checks the module options too', async () => {
    await expect(appWith({}, { ttl: -1 })).rejects.toThrow(
      /IdempotencyModule\.forRoot\(\): ttl must be a whole number of milliseconds above 0, got -1/,
    );
  });

  it('a store that reports itself unusable stops the boot; one that is only unreachable is logged', async () => {
    class MisconfiguredStore extends MemoryIdempotencyStore {
      async verify(): Promise<void> {
        throw new IdempotencyConfigurationError('The records table "nope" does not exist.', 'Run the migration.');
      }
    }
    await expect(appWith({}, { store: new MisconfiguredStore() })).rejects.toThrow(/records table "nope" does not exist/);

    class SleepyStore extends MemoryIdempotencyStore {
      async verify(): Promise<void> {
        throw new Error('connect ECONNREFUSED 127.0.0.1:1');
      }
    }
    const lines: string[] = [];
    const app = await createApp('express', [], { store: new SleepyStore(), logger: captureLogger(lines) });
    await app.close();
    expect(lines.filter((l) => l.startsWith('warn') && /SleepyStore did not answer its boot check.*ECONNREFUSED/.test(l))).toHaveLength(1);
  });

  it('a TypeORM store whose table was never created stops the boot, naming the fix; one dropped later is a 500, not a 503', async () => {
    const dataSource = new DataSource({ ...pgConnection });
    await dataSource.initialize();
    const table = `missing_records_${process.pid}_${Date.now()}`;
    try {
      await expect(appWith({}, { store: new TypeOrmIdempotencyStore(dataSource, { tableName: table }) })).rejects.toThrow(
        new RegExp(`${table}.*does not exist.*CreateIdempotencyTables1700000000000`),
      );

      const store = new TypeOrmIdempotencyStore(dataSource, { tableName: table });
      await store.ensureTable();
      const app = await appWith({}, { store });
      try {
        await request(app.getHttpServer()).post('/orders').set('Idempotency-Key', 'before-drop').expect(201);
        await dataSource.query(`DROP TABLE "${table}"`);
        const r = await request(app.getHttpServer()).post('/orders').set('Idempotency-Key', 'after-drop');
        expect(r.status).toBe(500);
        expect(r.body.code).toBe('IDEMPOTENCY_CONFIGURATION_ERROR');
      } finally {
        await app.close();
      }
    } finally {
      await dataSource.query(`DROP TABLE IF EXISTS "${table}"`);
      await dataSource.destroy();
    }
  });

  it('a DataSource that is not initialised when the app starts stops the boot', async () => {
    const dataSource = new DataSource({ ...pgConnection });
    await expect(appWith({}, { store: new TypeOrmIdempotencyStore(dataSource) })).rejects.toThrow(
      /DataSource of TypeOrmIdempotencyStore is not initialised/,
    );
  });

  it('a DataSource whose driver the store does not support is refused before the app is built', () => {
    const cockroach = new DataSource({
      type: 'cockroachdb',
      host: '127.0.0.1',
      port: 1,
      username: 'x',
      database: 'x',
      timeTravelQueries: false,
    });
    expect(() => new TypeOrmIdempotencyStore(cockroach)).toThrow(IdempotencyConfigurationError);
  });

  it('a service method without a key stops the boot instead of running every duplicate', async () => {
    @Injectable()
    class BillingService {
      @Idempotent()
      charge() {
        return 1;
      }
    }
    @Module({ imports: [IdempotencyModule.forRoot()], providers: [BillingService] })
    class AppModule {}
    const app = await NestFactory.create(AppModule, { logger: false });
    try {
      await expect(app.init()).rejects.toThrow(
        /BillingService\.charge \(a provider method\) has no request to read an idempotency key from, so it needs a key option/,
      );
    } finally {
      await app.close();
    }
  });

  it('header versioning keeps two versions of one path apart, even when a path segment looks like a version', async () => {
    const effects = new Effects();
    @Controller('r1/r2')
    class VersionedController {
      @Post()
      @Version('1')
      @Idempotent()
      v1() {
        return { v: 1, n: effects.hit('v1') };
      }

      @Post()
      @Version('2')
      @Idempotent()
      v2() {
        return { v: 2, n: effects.hit('v2') };
      }
    }
    for (const platform of platforms) {
      const app = await createApp(platform, [VersionedController], {}, false, (a) =>
        a.enableVersioning({ type: VersioningType.HEADER, header: 'x-api-version' }),
      );
      try {
        const key = newKey('header-version');
        const one = await request(app.getHttpServer()).post('/r1/r2').set('x-api-version', '1').set('Idempotency-Key', key);
        const two = await request(app.getHttpServer()).post('/r1/r2').set('x-api-version', '2').set('Idempotency-Key', key);
        expect(one.body.v).toBe(1);
        expect(two.body.v).toBe(2);
        expect(two.headers['idempotent-replayed']).toBeUndefined();
      } finally {
        await app.close();
      }
    }
  });

  it('a controller in a module that cannot reach IdempotencyModule stops the boot', async () => {
    @Controller('lonely')
    class LonelyController {
      @Post()
      @Idempotent()
      create() {
        return 1;
      }
    }
    @Module({ controllers: [LonelyController] })
    class FeatureModule {}
    @Module({ imports: [IdempotencyModule.forRoot(), FeatureModule] })
    class AppModule {}
    const app = await NestFactory.create(AppModule, { logger: false });
    try {
      await expect(app.init()).rejects.toThrow(/LonelyController\.create cannot find IdempotencyModule.*isGlobal: true/);
    } finally {
      await app.close();
    }
  });
});

describe('nothing silent: the default log and the memory store’s evictions', () => {
  class BrokenStore extends MemoryIdempotencyStore {
    override async claim(): Promise<never> {
      throw new Error('ECONNRESET: the store hung up');
    }
  }
  function app(module: IdempotencyModuleOptions, logger: LoggerService | false) {
    @Controller('jobs')
    class JobsController {
      @Post()
      @Idempotent()
      create() {
        return { ok: true };
      }
    }
    return createApp('express', [JobsController], module, logger);
  }

  it('logs a store outage once per cause per 10 s through Nest’s logger, with the key hashed', async () => {
    const lines: string[] = [];
    const a = await app({ store: new BrokenStore() }, captureLogger(lines));
    try {
      for (let i = 0; i < 3; i++) {
        const r = await request(a.getHttpServer()).post('/jobs').set('Idempotency-Key', `secret-key-${i}`);
        expect(r.status).toBe(503);
        // The cause (hosts, ports, driver messages) is for the server log, not for clients.
        expect(r.body.detail).toBe('The idempotency store is unavailable.');
      }
    } finally {
      await a.close();
    }
    const outage = lines.filter((l) => /^warn Idempotency The idempotency store failed/.test(l));
    expect(outage).toHaveLength(1);
    expect(outage[0]).toMatch(/ECONNRESET/);
    expect(lines.join('\n')).not.toMatch(/secret-key/);
    // Nothing per request at `log` level.
    expect(lines.filter((l) => l.startsWith('log Idempotency '))).toEqual([]);
  });

  it('logs fail-open runs as warnings', async () => {
    const lines: string[] = [];
    const a = await app({ store: new BrokenStore(), onStoreError: 'fail-open' }, captureLogger(lines));
    try {
      await request(a.getHttpServer()).post('/jobs').set('Idempotency-Key', 'k').expect(201);
    } finally {
      await a.close();
    }
    expect(lines.some((l) => /^warn Idempotency .*WITHOUT protection/.test(l))).toBe(true);
  });

  it('logger: false silences it; a custom LoggerService receives it', async () => {
    const nestLines: string[] = [];
    const silent = await app({ store: new BrokenStore(), logger: false }, captureLogger(nestLines));
    try {
      await request(silent.getHttpServer()).post('/jobs').set('Idempotency-Key', 'k').expect(503);
    } finally {
      await silent.close();
    }
    expect(nestLines.filter((l) => / Idempotency /.test(l))).toEqual([]);

    const mine: string[] = [];
    const custom = await app({ store: new BrokenStore(), logger: captureLogger(mine) }, false);
    try {
      await request(custom.getHttpServer()).post('/jobs').set('Idempotency-Key', 'k').expect(503);
    } finally {
      await custom.close();
    }
    expect(mine.some((l) => /^warn .*The idempotency store failed/.test(l))).toBe(true);
  });

  it('the memory store reports a result evicted before its ttl: an event and a warning', async () => {
    const events: IdempotencyEvent[] = [];
    const lines: string[] = [];
    const a = await app({ store: new MemoryIdempotencyStore({ maxEntries: 2 }), onEvent: (e) => events.push(e) }, captureLogger(lines));
    try {
      for (const key of ['e1', 'e2', 'e3', 'e4']) await request(a.getHttpServer()).post('/jobs').set('Idempotency-Key', key).expect(201);
    } finally {
      await a.close();
    }
    const evicted = events.filter((e) => e.type === 'evicted_before_expiry');
    expect(evicted).toHaveLength(2);
    expect(evicted[0].reason).toMatch(/maxEntries 2/);
    const warnings = lines.filter((l) => /^warn Idempotency The memory store dropped a result before its ttl/.test(l));
    expect(warnings).toHaveLength(1);
  });
});
