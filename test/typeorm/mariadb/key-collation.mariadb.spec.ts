import type { DataSource } from 'typeorm';
import { IdempotencyConfigurationError } from '../../../lib/core/errors.js';
import { mysqlCollationsOf } from '../../../lib/typeorm/column-types.js';
import { insertOrGet } from '../../../lib/typeorm/index.js';
import { Account, RefundRecord } from '../refund.entities.js';
import { createPgDataSource, createSqljsDataSource } from '../support.js';
import { createMariaDataSource } from './support.js';

/** Keys that a case-, accent- or space-insensitive collation takes for one. */
const LOOKALIKES = ['evt_1AbC', 'evt_1abc', 'evt_1AbC ', 'ÉVT', 'EVT', 'evt'];

async function collationOf(dataSource: DataSource): Promise<string> {
  const [row] = (await dataSource.query(
    "SELECT COLLATION_NAME AS collation FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'refund_records' AND COLUMN_NAME = 'idem_key'",
  )) as Array<{ collation: string }>;
  return row.collation;
}

/** Each look-alike key gets a row of its own, and a second insert of each returns that row. */
async function expectEveryKeyApart(dataSource: DataSource): Promise<void> {
  const manager = dataSource.manager;
  const ids = new Map<string, number>();
  for (const [index, idemKey] of LOOKALIKES.entries()) {
    const { entity, created } = await insertOrGet(manager, RefundRecord, { idemKey, accountId: 1, amount: index + 1 });
    expect({ idemKey, created, amount: entity.amount, key: entity.idemKey }).toEqual({
      idemKey,
      created: true,
      amount: index + 1,
      key: idemKey,
    });
    ids.set(idemKey, entity.id);
  }
  for (const [index, idemKey] of LOOKALIKES.entries()) {
    const { entity, created } = await insertOrGet(manager, RefundRecord, { idemKey, accountId: 1, amount: 100 });
    expect({ idemKey, created, id: entity.id, amount: entity.amount }).toEqual({
      idemKey,
      created: false,
      id: ids.get(idemKey),
      amount: index + 1,
    });
  }
}

describe('IdempotentEntity keys compare exactly', () => {
  it("picks the server's NO PAD binary collation from TypeORM's version number", () => {
    expect(mysqlCollationsOf('10.11.19', 'mysql').exact).toBe('utf8mb4_nopad_bin');
    expect(mysqlCollationsOf('11.4.2', 'mysql').exact).toBe('utf8mb4_nopad_bin');
    expect(mysqlCollationsOf('8.0.36', 'mysql').exact).toBe('utf8mb4_0900_bin');
    expect(mysqlCollationsOf('8.4.3', 'mariadb').exact).toBe('utf8mb4_nopad_bin');
    expect(mysqlCollationsOf('9.1.0', 'mysql')).toEqual({ exact: 'utf8mb4_0900_bin', binary: 'utf8mb4_bin' });
  });

  it('on MariaDB (mariadb driver): the synchronized idem_key is NO PAD binary and every look-alike key is its own row', async () => {
    const db = await createMariaDataSource({ entities: [RefundRecord, Account], poolSize: 2 });
    try {
      expect(await collationOf(db.dataSource)).toBe('utf8mb4_nopad_bin');
      await expectEveryKeyApart(db.dataSource);
    } finally {
      await db.destroy();
    }
  });

  it('on MariaDB through the mysql driver (the collation follows the server, not the driver name)', async () => {
    const db = await createMariaDataSource({ type: 'mysql', entities: [RefundRecord, Account], poolSize: 2 });
    try {
      expect(await collationOf(db.dataSource)).toBe('utf8mb4_nopad_bin');
      await expectEveryKeyApart(db.dataSource);
    } finally {
      await db.destroy();
    }
  });

  it('on MariaDB, a column made before (utf8mb4_general_ci) refuses a look-alike key instead of returning the other row, until the documented ALTER', async () => {
    const db = await createMariaDataSource({ entities: [RefundRecord, Account], poolSize: 2 });
    try {
      const dataSource = db.dataSource;
      await dataSource.query(
        'ALTER TABLE `refund_records` MODIFY `idem_key` varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci NOT NULL',
      );
      const first = await insertOrGet(dataSource.manager, RefundRecord, { idemKey: 'evt_1AbC', accountId: 1, amount: 1 });
      expect(first.created).toBe(true);
      for (const lookalike of ['evt_1abc', 'evt_1AbC ']) {
        const error = await insertOrGet(dataSource.manager, RefundRecord, { idemKey: lookalike, accountId: 1, amount: 2 }).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(IdempotencyConfigurationError);
        expect((error as IdempotencyConfigurationError).message).toContain(
          `compares ${JSON.stringify(lookalike)} equal to another key, "evt_1AbC"`,
        );
        expect((error as IdempotencyConfigurationError).hint).toContain('COLLATE utf8mb4_nopad_bin');
      }
      // The migration of docs/entity-patterns.md.
      await dataSource.query(
        'ALTER TABLE `refund_records` MODIFY `idem_key` varchar(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_nopad_bin NOT NULL',
      );
      const second = await insertOrGet(dataSource.manager, RefundRecord, { idemKey: 'evt_1abc', accountId: 1, amount: 2 });
      expect(second).toMatchObject({ created: true, entity: { idemKey: 'evt_1abc', amount: 2 } });
      // TypeORM's schema sync leaves the altered column alone.
      const pending = await dataSource.driver.createSchemaBuilder().log();
      expect(pending.upQueries.map((query) => query.query).filter((query) => query.includes('idem_key'))).toEqual([]);
    } finally {
      await db.destroy();
    }
  });

  it('on PostgreSQL', async () => {
    const db = await createPgDataSource({ entities: [RefundRecord, Account], poolSize: 2 });
    try {
      await expectEveryKeyApart(db.dataSource);
    } finally {
      await db.destroy();
    }
  });

  it('on SQLite (sql.js)', async () => {
    const dataSource = await createSqljsDataSource({ entities: [RefundRecord, Account] });
    try {
      await expectEveryKeyApart(dataSource);
    } finally {
      await dataSource.destroy();
    }
  });
});
