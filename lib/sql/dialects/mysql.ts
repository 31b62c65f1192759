import { createHash, randomUUID } from 'node:crypto';
import { IdempotencyInFlightError } from '../../core/errors.js';
import type { ClaimResult } from '../../core/record.js';
import type { ClaimRequest } from '../../core/store.js';
import type { AcquireStep, Acquisition, ClaimAnswer, SqlDialect } from '../dialect.js';
import { transientLockErrorOf } from '../failures.js';
import { plain, type SqlResult } from '../statement.js';
import { checkResultCapacity, forgetResultCapacity, mysqlResultCapacityOf, storableMysqlResult } from './mysql-result-capacity.js';
import { claimReturningOf } from './mysql-server.js';
import { latestExpiryOf, mysqlQuoted, mysqlRecordsTableDdl, mysqlStatements, type MysqlStatements } from './mysql-statements.js';
import { isFlagSet, liveRowAcquisition, toRecord } from './record-row.js';
import type { TableName } from './records-table.js';

/**
 * MySQL 8 and MariaDB 10.11+ (TypeORM's `mysql` and `mariadb` drivers). One INSERT ... ON
 * DUPLICATE KEY UPDATE claims (inserts, or takes a dead row over) or leaves the live row
 * alone, outside a transaction and inside one; see `mysqlStatements`. Two variants, picked
 * by `forServer` once per DataSource: on MariaDB the claim returns the row either way (a
 * dead one is then taken over by a second statement); on MySQL 8 a claim shows in the
 * insert id (the server clock it used), and a duplicate is then read with a second
 * statement. InnoDB's deadlocks and lock wait timeouts roll back a whole transaction: a
 * claim statement or an idempotent transaction that met one runs again.
 */
export function mysqlDialect(name: TableName): SqlDialect {
  const table: TableName = { schema: name.schema, table: name.table, quoted: mysqlQuoted(name) };
  const lockName = purgeLockNameOf(table.quoted);
  const variants: { plain?: SqlDialect; returning?: SqlDialect } = {};
  const variant = (returning: boolean): SqlDialect =>
    returning ? (variants.returning ??= build(true)) : (variants.plain ??= build(false));
  const build = (returning: boolean): SqlDialect => {
    const statements = mysqlStatements(table, returning);
    return {
      ...statements,
      name: 'mysql',
      table,
      createTable: () => mysqlRecordsTableDdl(table),
      forServer: async (db) => variant(await claimReturningOf(db)),
      verify: async (db, maxResultBytes) => {
        forgetResultCapacity(db, table);
        checkResultCapacity(table, await mysqlResultCapacityOf(db, table), maxResultBytes);
      },
      claimAnswer: returning ? (key, request, result) => returningClaimAnswer(statements, key, request, result) : insertIdClaimAnswer,
      // An autocommit statement that InnoDB rolled back: nothing happened, run it again.
      claimMayRetry: (error) => transientLockErrorOf(error) !== undefined,
      storableResult: (db, key, result, report, connection) => storableMysqlResult(db, table, key, result, report, connection),
      withPurgeLock: (db, purge) =>
        db.withConnection(async (connection) => {
          // GET_LOCK: MySQL's and MariaDB's advisory lock, held by this session until released.
          const { rows } = await connection.run(plain('SELECT GET_LOCK(?, 0) AS locked', [lockName]));
          if (Number(rows[0]?.locked) !== 1) return { ran: false, deleted: 0 };
          try {
            return { ran: true, deleted: await purge(connection) };
          } finally {
            await connection.run(plain('SELECT RELEASE_LOCK(?)', [lockName]));
          }
        }),
      // The next (autocommit) statement runs under READ COMMITTED, where its range scan
      // locks only the rows it deletes, not the gaps new claims insert into.
      beforePurgeBatch: async (lockHolder) => {
        await lockHolder.run(plain('SET TRANSACTION ISOLATION LEVEL READ COMMITTED'));
      },
      purgeResume: returning ? latestExpiryOf : undefined,
      retriedTransaction: (error) => {
        const kind = transientLockErrorOf(error);
        if (!kind) return undefined;
        return kind === 'deadlock' ? 'InnoDB deadlock (1213)' : 'InnoDB lock wait timeout (1205)';
      },
      // The server's own (InnoDB: REPEATABLE READ): the record is read with a locking read anyway.
      isolationOf: (requested) => requested,
      acquire: (step) => acquireByClaim(statements, returning, step),
    };
  };
  return variant(false);
}

/**
 * MariaDB: the claim returns the row it leaves, claimed when it holds this claim's token;
 * a dead row is taken over by a second statement, which may find another claimer was first.
 */
function returningClaimAnswer(sql: MysqlStatements, key: string, request: ClaimRequest, result: SqlResult): ClaimAnswer {
  const row = result.rows[0];
  if (!row) return 'again';
  if (isFlagSet(row.dead)) {
    return {
      followUp: sql.takeOver(key, request.token, request.leaseTtl, request.fingerprint),
      // Not taken over (another claimer was first), or taken over through a driver that
      // reports no insert id (Prisma): the next claim statement finds the live row, ours or not.
      answer: (takeOver) => {
        const answer = insertIdClaimAnswer(key, request, takeOver);
        return answer === 'read' ? 'again' : answer;
      },
    };
  }
  const record = toRecord(key, row);
  if (record.status === 'in_progress' && record.leaseToken === request.token) return { claimed: true, record };
  return { claimed: false, record };
}

/** MySQL 8: a claim shows in the insert id (the server clock it used); otherwise read the live row. */
function insertIdClaimAnswer(key: string, request: ClaimRequest, result: SqlResult): ClaimResult | 'read' {
  const now = result.insertId ?? 0;
  if (now <= 0) return 'read';
  const record = {
    status: 'in_progress',
    key,
    leaseToken: request.token,
    leaseExpiresAt: now + request.leaseTtl,
    fingerprint: request.fingerprint,
  } as const;
  return { claimed: true, record };
}

/**
 * The store's claim statement, inside the transaction. Its INSERT ... ON DUPLICATE KEY
 * UPDATE takes the key's row lock, so a concurrent duplicate waits on it until the first
 * transaction ends; the statement then reads the committed row (a locking read, whatever
 * the isolation level), and takes it over only if it is dead. So: inserted or taken over
 * (owned), or a live row that this transaction now holds locked until it rolls back at
 * once: a completed record (replay) or a lease of the regular claim path.
 *
 * Gap locks: a key that no row holds is locked as a gap, and two duplicates that both
 * waited for a first transaction that rolled back can each hold that gap and want to
 * insert into it; InnoDB breaks that with a deadlock error for one of them, which the
 * transaction's retry (`retriedTransaction`) runs again (it then finds the other's row).
 */
async function acquireByClaim(sql: MysqlStatements, returning: boolean, step: AcquireStep): Promise<Acquisition> {
  const { connection, request, waitTimeout } = step;
  const token = randomUUID();
  const statement = sql.claim(request.key, token, request.ttl, request.fingerprint);
  let claimed;
  if (waitTimeout === undefined) {
    claimed = await connection.run(statement);
  } else {
    // Session-wide on a pooled connection: set for this statement, then put back.
    await connection.run(
      plain('SET @nestjs_idem_wait = @@SESSION.innodb_lock_wait_timeout, SESSION innodb_lock_wait_timeout = ?', [
        Math.max(1, Math.ceil(waitTimeout / 1000)),
      ]),
    );
    try {
      claimed = await connection.run(statement);
    } catch (error) {
      if (transientLockErrorOf(error) === 'lock_wait_timeout') throw new IdempotencyInFlightError(waitTimeout);
      throw error;
    } finally {
      await connection.run(plain('SET SESSION innodb_lock_wait_timeout = @nestjs_idem_wait')).catch(() => undefined);
    }
  }
  let row: Record<string, unknown> | undefined;
  if (returning) {
    row = claimed.rows[0];
    // Dead: taken over here. The claim holds the row's lock until the transaction ends, so
    // the take-over finds it as the claim did; one that matches nothing starts over anyway.
    // Rows matched, not the insert id, which Prisma does not report.
    if (row && isFlagSet(row.dead)) {
      const takenOver = await connection.run(sql.takeOver(request.key, token, request.ttl, request.fingerprint));
      return takenOver.affected > 0 ? { kind: 'owned' } : { kind: 'restart' };
    }
  } else {
    if ((claimed.insertId ?? 0) > 0) return { kind: 'owned' };
    row = (await connection.run(sql.readAny(request.key))).rows[0];
  }
  if (!row) return { kind: 'restart' };
  // The claim's own token: inserted or taken over (on MySQL 8, where a driver that does not
  // report the insert id leaves only the row to tell).
  if (row.status === 'in_progress' && row.lease_token === token) return { kind: 'owned' };
  return liveRowAcquisition(row, request);
}

/** @internal A stable GET_LOCK name per table (the same on every instance; at most 64 characters). */
export function purgeLockNameOf(table: string): string {
  return 'nestjs_idem_purge_' + createHash('sha256').update(table).digest('hex').slice(0, 40);
}
