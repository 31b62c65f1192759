import { IdempotencyService, MemoryIdempotencyStore } from '../../lib/index.js';

describe('IdempotencyService.run', () => {
  it('runs once per key and scope, concurrently and after completion', async () => {
    const service = new IdempotencyService({ store: new MemoryIdempotencyStore() });
    let runs = 0;
    const work = async () => {
      runs++;
      await new Promise((r) => setTimeout(r, 50));
      return { runs };
    };
    const results = await Promise.all(Array.from({ length: 10 }, () => service.run('evt-1', work, { scope: 'refunds' })));
    expect(runs).toBe(1);
    expect(results.every((r) => r.runs === 1)).toBe(true);
    expect(await service.run('evt-1', work, { scope: 'refunds' })).toEqual({ runs: 1 });
    expect(await service.run('evt-1', work, { scope: 'emails' })).toEqual({ runs: 2 });
    expect(await service.inspect('evt-1', { handler: 'run:refunds' })).toMatchObject({ status: 'completed' });
    expect(await service.forget('evt-1', { handler: 'run:refunds' })).toBe(true);
    expect(await service.run('evt-1', work, { scope: 'refunds' })).toEqual({ runs: 3 });
  });
});
