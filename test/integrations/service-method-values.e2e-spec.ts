import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import {
  Idempotent,
  IdempotencyConfigurationError,
  IdempotencyFingerprintMismatchError,
  IdempotencyModule,
  IdempotencyNotReplayableError,
  IdempotencyService,
  type IdempotencyEvent,
} from '../../lib/index.js';
import { realStores, type StoreUnderTest } from '../support/real-stores.js';
import { Effects } from '../support/effects.js';

/**
 * What a provider method's duplicate gets back, through each store's string: a faithful
 * copy of the first value (Date, Map, Set, bigint, Buffer...), or, for what cannot be
 * copied, a refusal reported on the first call. And what its fingerprint sees: another
 * Map under the same key is a mismatch, `f(x, undefined)` is the call `f(x)`.
 */

const effects = new Effects();

function invoice(id: string) {
  const customer = { id: 'cus_1', since: new Date(0) };
  return {
    id,
    issuedAt: new Date(1_764_625_404_123),
    totalCents: 9007199254740993n,
    lines: new Map<string, { qty: number; unit: bigint }>([
      ['sku_a', { qty: 2, unit: 450n }],
      ['sku_b', { qty: 1, unit: 99n }],
    ]),
    tags: new Set(['paid', 'eu']),
    pdf: Buffer.from('%PDF-1.7'),
    weights: new Float64Array([0.25, -0]),
    discount: undefined,
    rate: NaN,
    billedTo: customer,
    shippedTo: customer,
  };
}

class Amount {
  readonly #cents: number;
  constructor(cents: number) {
    this.#cents = cents;
  }
  get cents(): number {
    return this.#cents;
  }
}

@Injectable()
class InvoiceValuesService {
  @Idempotent({ key: (id: string) => id, scope: 'values-invoice' })
  async issue(id: string): Promise<ReturnType<typeof invoice>> {
    effects.hit(id);
    return invoice(id);
  }

  @Idempotent({ key: (id: string) => id, scope: 'values-callback' })
  async withCallback(id: string): Promise<{ id: string; onPaid: () => string }> {
    effects.hit(id);
    return { id, onPaid: () => 'paid' };
  }

  @Idempotent({ key: (id: string) => id, scope: 'values-lines' })
  async applyLines(id: string, lines: Map<string, number>): Promise<number> {
    effects.hit(id);
    return [...lines.values()].reduce((sum, qty) => sum + qty, 0);
  }

  @Idempotent({ key: (id: string) => id, scope: 'values-note' })
  async annotate(id: string, note?: string): Promise<string> {
    effects.hit(id);
    return `${id}:${note ?? '-'}`;
  }

  @Idempotent({ key: (id: string) => id, scope: 'values-amount' })
  async charge(id: string, amount: Amount): Promise<number> {
    effects.hit(id);
    return amount.cents;
  }
}

const backends = realStores('method_values');

let n = 0;
const unique = (name: string) => `${name}-${process.pid}-${++n}`;

describe.each(backends)('a provider method replays what it returned (%s)', (_name, open) => {
  let backend: StoreUnderTest;
  let app: INestApplicationContext;
  let service: InvoiceValuesService;
  let idempotency: IdempotencyService;
  const events: IdempotencyEvent[] = [];

  beforeAll(async () => {
    backend = await open();
    @Module({
      imports: [IdempotencyModule.forRoot({ logger: false, store: backend.store, onEvent: (event) => events.push(event) })],
      providers: [InvoiceValuesService],
    })
    class ValuesModule {}
    app = await NestFactory.createApplicationContext(ValuesModule, { logger: false });
    service = app.get(InvoiceValuesService);
    idempotency = app.get(IdempotencyService);
  });
  afterAll(async () => {
    await app?.close();
    await backend?.dispose();
  });

  it('gives the duplicate Date, Map, Set, bigint, Buffer, typed arrays, undefined and NaN as the first call returned them', async () => {
    const id = unique('inv');
    const first = await service.issue(id);
    const replay = await service.issue(id);
    expect(effects.count(id)).toBe(1);
    expect(replay).toStrictEqual(first);
    expect(replay).toStrictEqual(invoice(id));
    expect(replay.issuedAt).toBeInstanceOf(Date);
    expect(replay.lines.get('sku_a')?.unit).toBe(450n);
    expect(Buffer.isBuffer(replay.pdf)).toBe(true);
    expect(Object.is(replay.weights[1], -0)).toBe(true);
    expect('discount' in replay).toBe(true);
    expect(replay.shippedTo).toBe(replay.billedTo);
  });

  it('reports a value with a function as not storable on the first call; the duplicate is refused with the reason, not given {id}', async () => {
    const id = unique('cb');
    const first = await service.withCallback(id);
    expect(first.onPaid()).toBe('paid');
    expect(events.some((event) => event.type === 'response_not_storable' && /a function at \.onPaid/.test(event.reason ?? ''))).toBe(true);
    const replay = await service.withCallback(id).catch((error: unknown) => error);
    expect(replay).toBeInstanceOf(IdempotencyNotReplayableError);
    expect(effects.count(id)).toBe(1);
  });

  it('refuses another Map under the same key as a mismatch, and replays the same Map', async () => {
    const id = unique('lines');
    expect(await service.applyLines(id, new Map([['sku_a', 1]]))).toBe(1);
    await expect(service.applyLines(id, new Map([['sku_a', 100]]))).rejects.toBeInstanceOf(IdempotencyFingerprintMismatchError);
    expect(await service.applyLines(id, new Map([['sku_a', 1]]))).toBe(1);
    expect(effects.count(id)).toBe(1);
  });

  it('treats f(x, undefined) as the call f(x): a replay, not a mismatch', async () => {
    const id = unique('note');
    expect(await service.annotate(id)).toBe(`${id}:-`);
    expect(await service.annotate(id, undefined)).toBe(`${id}:-`);
    await expect(service.annotate(id, 'other')).rejects.toBeInstanceOf(IdempotencyFingerprintMismatchError);
    expect(effects.count(id)).toBe(1);
  });

  it('refuses an argument whose state it cannot see (#private fields) before running, instead of fingerprinting it as {}', async () => {
    const id = unique('amount');
    const refused = await service.charge(id, new Amount(100)).catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(IdempotencyConfigurationError);
    expect((refused as Error).message).toMatch(/instance of Amount/);
    expect(effects.count(id)).toBe(0);
  });

  it('IdempotencyService.run replays faithfully, and decodeResult reads the stored value as the replay does', async () => {
    const key = unique('run');
    let runs = 0;
    const work = async () => ({ run: ++runs, at: new Date(7), ids: new Set([1n]) });
    const first = await idempotency.run(key, work, { scope: 'values-run' });
    expect(await idempotency.run(key, work, { scope: 'values-run' })).toStrictEqual(first);
    expect(runs).toBe(1);
    const record = await idempotency.inspect(key, { operation: 'run:values-run' });
    expect(idempotency.decodeResult(record!)).toMatchObject({ kind: 'value', value: { run: 1, at: new Date(7), ids: new Set([1n]) } });
  });
});
