import { DataSource } from 'typeorm';
import { IdempotencyConfigurationError } from '../../lib/core/errors.js';
import {
  IllegalStateTransitionError,
  OptimisticLockError,
  TypeOrmIdempotencyStore,
  createIdempotencyRecordsMigration,
  defineStateMachine,
  retryOnOptimisticLock,
  runIdempotentTransaction,
} from '../../lib/typeorm/index.js';
import { createSqljsDataSource } from './support.js';

// Option mistakes in the TypeORM folder follow the library's one rule (whole ms, whole
// counts) and come out as IdempotencyConfigurationError, naming the option and the value.
describe('TypeORM options and errors', () => {
  const unopened = new DataSource({ type: 'sqljs' });

  it.each([
    [{ purgeBatchSize: 0 }, /TypeOrmIdempotencyStore: purgeBatchSize must be a whole number above 0, got 0\./],
    [{ purgeBatchSize: 2.5 }, /purgeBatchSize must be a whole number above 0, got 2\.5\./],
    [{ purgeInterval: -1 }, /purgeInterval must be a whole number of milliseconds 0 or more, got -1\./],
    [{ purgeInterval: 10.5 }, /purgeInterval must be a whole number of milliseconds 0 or more, got 10\.5\./],
    [{ purgeInterval: Number.NaN }, /purgeInterval must be .*, got NaN\./],
    [{ waitTimeout: -5 }, /waitTimeout must be a whole number of milliseconds 0 or more, got -5\./],
  ])('the store refuses %p', (options, message) => {
    expect(() => new TypeOrmIdempotencyStore(unopened, options)).toThrow(IdempotencyConfigurationError);
    expect(() => new TypeOrmIdempotencyStore(unopened, options)).toThrow(message);
  });

  it('the store takes purgeInterval 0 (off) and whole numbers', () => {
    expect(() => new TypeOrmIdempotencyStore(unopened, { purgeInterval: 0, purgeBatchSize: 1, waitTimeout: 0 })).not.toThrow();
  });

  it('runIdempotentTransaction refuses a fractional ttl and a negative waitTimeout before opening a transaction', async () => {
    const dataSource = await createSqljsDataSource();
    try {
      const work = jest.fn(async () => 'done');
      await expect(runIdempotentTransaction(dataSource, { key: 'k', ttl: 1.5 }, work)).rejects.toThrow(
        /runIdempotentTransaction: ttl must be a whole number of milliseconds above 0, got 1\.5\./,
      );
      await expect(runIdempotentTransaction(dataSource, { key: 'k', waitTimeout: -1 }, work)).rejects.toBeInstanceOf(
        IdempotencyConfigurationError,
      );
      expect(work).not.toHaveBeenCalled();
    } finally {
      await dataSource.destroy();
    }
  });

  it('createIdempotencyRecordsMigration refuses a timestamp that is not 13-digit epoch ms', () => {
    for (const timestamp of [123, 1735000000000.5, 17350000000000]) {
      expect(() => createIdempotencyRecordsMigration('records', { timestamp })).toThrow(IdempotencyConfigurationError);
      expect(() => createIdempotencyRecordsMigration('records', { timestamp })).toThrow(
        `timestamp must be 13-digit epoch ms, got ${timestamp}.`,
      );
    }
  });

  it('retryOnOptimisticLock refuses negative or fractional retries and backoff, without calling fn', async () => {
    const fn = jest.fn(async () => 1);
    await expect(retryOnOptimisticLock(fn, { retries: -1 })).rejects.toThrow(/retries must be a whole number 0 or more, got -1\./);
    await expect(retryOnOptimisticLock(fn, { retries: 1.5 })).rejects.toBeInstanceOf(IdempotencyConfigurationError);
    await expect(retryOnOptimisticLock(fn, { backoff: -10 })).rejects.toThrow(/backoff must be a whole number of milliseconds/);
    expect(fn).not.toHaveBeenCalled();
    await expect(retryOnOptimisticLock(fn, { retries: 0, backoff: () => 0 })).resolves.toBe(1);
  });

  it('defineStateMachine refuses a malformed table with IdempotencyConfigurationError', () => {
    expect(() => defineStateMachine({ a: 'b' as unknown as string[] })).toThrow(IdempotencyConfigurationError);
    expect(() => defineStateMachine({ a: [''] })).toThrow(/lists a target that is not a non-empty string/);
  });

  it('OptimisticLockError and IllegalStateTransitionError carry their own titles', () => {
    expect(new OptimisticLockError('Account', 1, 1, 2).title).toBe('Concurrent update');
    expect(new IllegalStateTransitionError('a', 'b', []).title).toBe('Illegal state transition');
  });
});
