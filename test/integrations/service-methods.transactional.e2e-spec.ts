import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Column, Entity, PrimaryGeneratedColumn, type DataSource } from 'typeorm';
import { Idempotent, IdempotencyModule } from '../../lib/index.js';
import {
  IdempotencyRecordEntity,
  IdempotencyStepEntity,
  TypeOrmIdempotencyStore,
  getIdempotentEntityManager,
} from '../../lib/typeorm/index.js';
import { createSqljsDataSource } from '../typeorm/support.js';

/**
 * `transactional: true` on a provider method: its writes and its record commit in one
 * transaction, so a failure leaves neither, and a duplicate finds both.
 */
@Entity('it_method_postings')
class Posting {
  @PrimaryGeneratedColumn()
  id!: number;
  @Column()
  refundId!: string;
  @Column()
  amount!: number;
}

@Injectable()
class LedgerService {
  failAfterWrite = false;

  @Idempotent({ key: (refundId: string) => refundId, transactional: true })
  async post(refundId: string, amount: number): Promise<{ refundId: string; amount: number }> {
    const manager = getIdempotentEntityManager();
    await manager.save(manager.create(Posting, { refundId, amount }));
    if (this.failAfterWrite) throw new Error('payment provider down');
    return { refundId, amount };
  }
}

describe('@Idempotent({ key, transactional: true }) on a provider method (TypeORM, SQLite)', () => {
  let dataSource: DataSource;
  let app: INestApplicationContext;
  let ledger: LedgerService;
  const postings = (refundId: string) => dataSource.getRepository(Posting).countBy({ refundId });

  beforeAll(async () => {
    dataSource = await createSqljsDataSource({ entities: [IdempotencyRecordEntity, IdempotencyStepEntity, Posting] });
    @Module({
      imports: [IdempotencyModule.forRoot({ logger: false, store: new TypeOrmIdempotencyStore(dataSource) })],
      providers: [LedgerService],
    })
    class LedgerModule {}
    app = await NestFactory.createApplicationContext(LedgerModule, { logger: false });
    ledger = app.get(LedgerService);
  });
  afterAll(async () => {
    await app?.close();
    await dataSource?.destroy();
  });

  it('writes once and replays the stored value to a duplicate', async () => {
    expect(await ledger.post('rf_1', 500)).toEqual({ refundId: 'rf_1', amount: 500 });
    expect(await ledger.post('rf_1', 500)).toEqual({ refundId: 'rf_1', amount: 500 });
    expect(await postings('rf_1')).toBe(1);
  });

  it('rolls the write back with the record when the method throws, so the retry writes once', async () => {
    ledger.failAfterWrite = true;
    await expect(ledger.post('rf_2', 700)).rejects.toThrow('payment provider down');
    expect(await postings('rf_2')).toBe(0);
    ledger.failAfterWrite = false;
    expect(await ledger.post('rf_2', 700)).toEqual({ refundId: 'rf_2', amount: 700 });
    expect(await postings('rf_2')).toBe(1);
  });
});
