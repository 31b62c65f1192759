import { PurgeBatchSize } from '../../lib/sql/purge-batch-size.js';

describe('PurgeBatchSize', () => {
  it('aims each batch at a fifth of statementTimeout, at most 1 s', () => {
    expect(new PurgeBatchSize(1000, 5_000).targetMs).toBe(1_000);
    expect(new PurgeBatchSize(1000, 10_000).targetMs).toBe(1_000);
    expect(new PurgeBatchSize(1000, 500).targetMs).toBe(100);
    // No deadline (0, or SQLite): 1 s.
    expect(new PurgeBatchSize(1000, 0).targetMs).toBe(1_000);
  });

  it('halves after a slow batch or a failure, never below 10, and doubles back after quick ones up to purgeBatchSize', () => {
    const size = new PurgeBatchSize(1000, 5_000);
    expect(size.current).toBe(1000);
    size.finished(1_200);
    expect(size.current).toBe(500);
    size.failed();
    expect(size.current).toBe(250);
    // Between a quarter of the target and the target: kept.
    size.finished(600);
    expect(size.current).toBe(250);
    for (let i = 0; i < 10; i++) size.failed();
    expect(size.current).toBe(10);
    size.finished(100);
    expect(size.current).toBe(20);
    for (let i = 0; i < 10; i++) size.finished(1);
    expect(size.current).toBe(1000);
  });

  it('never grows past, or shrinks below, a purgeBatchSize under 10', () => {
    const size = new PurgeBatchSize(4, 5_000);
    size.failed();
    expect(size.current).toBe(4);
    size.finished(1);
    expect(size.current).toBe(4);
  });
});
