import type { INestApplication } from '@nestjs/common';
import request from 'supertest';
import { IdempotencyPrincipal, IdempotencyService, MemoryIdempotencyStore } from '../../lib/index.js';
import { deserializeOutcome, decodeValue } from '../../lib/core/index.js';
import { createHttpApp, sleep, type Effects } from '../nest/http-app.js';

// docs/observability.md tells support staff to find a customer's record with the raw key,
// the operation (HTTP method and route template) and the user id: this checks that recipe
// against real requests.
describe('inspect() and forget() on an HTTP handler, as documented for support staff', () => {
  let app: INestApplication;
  let effects: Effects;
  let service: IdempotencyService;
  const operation = 'POST /charges';
  // request.user = { id: 'user-7' } (the test guard): the default principal is typed and names its source.
  const user7 = IdempotencyPrincipal.of('user.id', 'user-7');
  const key = `support-${process.pid}-${Date.now()}`;

  beforeAll(async () => {
    ({ app, effects } = await createHttpApp('express', { module: { store: new MemoryIdempotencyStore() }, slowMs: 600 }));
    service = app.get(IdempotencyService);
  });
  afterAll(async () => {
    await app?.close();
  });

  it('shows the running lease, then the stored answer, under operation + principal', async () => {
    const running = request(app.getHttpServer()).post('/charges').set('Idempotency-Key', key).set('X-User', 'user-7').send({ amount: 3 });
    const done = running.then((r) => r);
    let inFlight;
    for (let i = 0; i < 300 && !inFlight; i++) {
      inFlight = await service.inspect(key, { operation, principal: user7 });
      if (!inFlight) await sleep(10);
    }
    expect(inFlight).toMatchObject({ status: 'in_progress' });
    expect(inFlight?.status === 'in_progress' && inFlight.leaseExpiresAt).toBeGreaterThan(Date.now());

    const first = await done;
    expect(first.status).toBe(201);
    const record = await service.inspect(key, { operation, principal: user7 });
    expect(record?.status).toBe('completed');
    if (record?.status !== 'completed') return;
    expect(record.expiresAt).toBeGreaterThan(Date.now());
    const outcome = deserializeOutcome(record.result);
    expect(outcome.kind).toBe('value');
    if (outcome.kind !== 'value') return;
    expect(outcome.meta?.status).toBe(201);
    expect(decodeValue(outcome.value)).toEqual(first.body);

    // Another user's scope, or no principal, is another record.
    expect(await service.inspect(key, { operation, principal: IdempotencyPrincipal.of('user.id', 'user-8') })).toBeUndefined();
    expect(await service.inspect(key, { operation })).toBeUndefined();
    // A scope option's 'user-7' is another source than request.user.id: another record.
    expect(await service.inspect(key, { operation, principal: 'user-7' })).toBeUndefined();
  });

  it('forget() lets the next request with that key run the handler again', async () => {
    const before = effects.count('charge');
    expect(await service.forget(key, { operation, principal: user7 })).toBe(true);
    expect(await service.forget(key, { operation, principal: user7 })).toBe(false);
    const again = await request(app.getHttpServer())
      .post('/charges')
      .set('Idempotency-Key', key)
      .set('X-User', 'user-7')
      .send({ amount: 3 });
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBeUndefined();
    expect(effects.count('charge')).toBe(before + 1);
  });
});
