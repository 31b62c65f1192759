import { Column, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { IdempotentEntity, VersionedEntity } from '../../lib/typeorm/index.js';

/** One row per refund message: `idem_key` is the message id, unique. */
@Entity('refund_records')
export class RefundRecord extends IdempotentEntity {
  @PrimaryGeneratedColumn()
  id: number;

  @Column('int', { name: 'account_id' })
  accountId: number;

  @Column('int')
  amount: number;
}

@Entity('accounts')
export class Account extends VersionedEntity {
  @PrimaryGeneratedColumn()
  id: number;

  @Column('int')
  balance: number;

  @Column('varchar', { default: '' })
  notes: string;
}

export const refundEntities = [RefundRecord, Account];
