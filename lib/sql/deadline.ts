import type { ConnectionDeadline, IdempotentIsolationLevel, SqlConnection, SqlDatabase, SqlTransaction } from './port.js';
import type { SqlResult, Statement } from './statement.js';
import { TimerQueue, type TimerQueueItem } from '../core/timer-queue.js';
import { DeadlineSignal } from './deadline-signal.js';

/**
 * The client-side deadline of the SQL stores (`statementTimeout`): a stalled network path
 * or a database that stopped answering must give every request its 503 within a bound,
 * not hold it (and its pooled connection) until TCP gives up, minutes later. 4 s, so that
 * a request stalled on its claim gets its 503 within 5 s end to end (measured 4.0-4.1 s;
 * with 5 s it was 5.07 s: the deadline bounds one operation, the request is a little more).
 */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 4_000;

/**
 * What a statement, a pool checkout or a COMMIT that ran past `statementTimeout` rejects
 * with. Its `code` is a socket's `ETIMEDOUT`, so `isConnectionLoss` (failures.ts) reads it
 * as the outage it is: `IdempotencyStoreUnavailableError`, HTTP 503, retriable.
 */
export class StatementDeadlineError extends Error {
  readonly code = 'ETIMEDOUT';

  /**
   * @param ms the deadline, ms
   * @param connection what became of the stuck connection: destroyed by the store, or left
   *   to the driver (one the store cannot reach: see `SqlDatabase.discardsStuckConnections`)
   */
  constructor(
    what: string,
    readonly ms: number,
    connection: 'discarded' | 'left to the driver' = 'discarded',
  ) {
    super(
      `The database did not answer ${what} within statementTimeout (${ms} ms); ` +
        (connection === 'discarded'
          ? 'its connection was discarded. '
          : 'its connection was left to the driver, which may hand it out again (see docs/reliability.md, "A path that drops every packet"). ') +
        'Check the database and the network path to it, or raise statementTimeout if statements this slow are expected.',
    );
    this.name = 'StatementDeadlineError';
  }
}

const bounded = new WeakSet<object>();

/** One statement on the pool in flight: its deadline's signal, and how its caller is told it passed. */
class PendingStatement extends DeadlineSignal implements TimerQueueItem {
  dueAt = 0;

  constructor(readonly reject: (error: unknown) => void) {
    super();
  }
}

/**
 * `db` with every operation of the store bounded by `ms` (undefined: the default; 0: `db`
 * as it is): a statement on the pool, the checkout (and BEGIN) of a held connection, each
 * statement on it, and a transaction's COMMIT. Past the deadline the call rejects with
 * `StatementDeadlineError` and the implementation is told (a `DeadlineSignal`) to destroy the
 * connection. A database bounded already is returned as it is (a transaction of a store
 * goes through both the store's records and the transaction's entry).
 */
export function withDeadline<Tx extends SqlTransaction>(db: SqlDatabase<Tx>, ms: number | undefined): SqlDatabase<Tx> {
  const limit = ms ?? DEFAULT_STATEMENT_TIMEOUT_MS;
  if (limit === 0 || bounded.has(db)) return db;
  const connection = db.discardsStuckConnections === false ? 'left to the driver' : 'discarded';
  // Every statement on the pool waits the same `limit`: one timer for all of them (a
  // timer per statement cost each one a timer created and cleared).
  const statements = new TimerQueue<PendingStatement>(limit, (pending) => {
    const error = new StatementDeadlineError('a statement', limit, connection);
    pending.abort(error);
    pending.reject(error);
  });
  const decorated: SqlDatabase<Tx> = {
    identity: db.identity,
    discardsStuckConnections: db.discardsStuckConnections,
    run(statement: Statement): Promise<SqlResult> {
      return new Promise<SqlResult>((resolve, reject) => {
        const pending = new PendingStatement(reject);
        statements.watch(pending, db.run(statement, pending), resolve, reject);
      });
    },
    withConnection<T>(fn: (connection: SqlConnection) => Promise<T>): Promise<T> {
      const held = new HeldConnection(limit, connection);
      return held.open((deadline) =>
        db.withConnection(
          (connection) => held.entered(() => fn({ run: (statement) => deadline.bound(() => connection.run(statement)) })),
          deadline,
        ),
      );
    },
    transaction<T>(isolation: IdempotentIsolationLevel | undefined, fn: (tx: Tx) => Promise<T>): Promise<T> {
      const held = new HeldConnection(limit, connection);
      return held.open((deadline) =>
        db.transaction(
          isolation,
          async (tx) => {
            const value = await held.entered(() => fn(boundTransaction(tx, held)));
            // From here on the implementation commits: bounded as one more operation.
            held.arm('the COMMIT');
            return value;
          },
          deadline,
        ),
      );
    },
  };
  bounded.add(decorated);
  return decorated;
}

/** `tx` with its statements bounded, and its connection reported lost once the deadline aborted it (the work's failure is then a 503). */
function boundTransaction<Tx extends SqlTransaction>(tx: Tx, held: HeldConnection): Tx {
  // A view on tx (its runner, its client), not a copy: the implementation's fields stay its own.
  return Object.create(tx, {
    run: { value: (statement: Statement) => held.bound(() => tx.run(statement)) },
    connectionLost: { get: () => held.aborted || tx.connectionLost },
  }) as Tx;
}

/**
 * The deadline of one held connection: one timer at a time, armed for the checkout
 * (until `fn` is entered), for each statement, and for the COMMIT.
 */
class HeldConnection implements ConnectionDeadline {
  readonly signal = new DeadlineSignal();
  private timer: ReturnType<typeof setTimeout> | undefined;
  private expire: ((error: StatementDeadlineError) => void) | undefined;
  private error: StatementDeadlineError | undefined;

  constructor(
    private readonly ms: number,
    private readonly connection: 'discarded' | 'left to the driver',
  ) {}

  get aborted(): boolean {
    return this.error !== undefined;
  }

  /** Runs the implementation's call, rejecting at the first deadline it runs past. */
  async open<T>(call: (deadline: ConnectionDeadline) => Promise<T>): Promise<T> {
    const expired = new Promise<never>((_, reject) => (this.expire = reject));
    this.arm('the checkout of a pooled connection');
    const inner = call(this);
    // Past the deadline the implementation's call settles later (or never): nobody awaits it.
    inner.catch(() => undefined);
    try {
      return await Promise.race([inner, expired]);
    } finally {
      this.disarm();
    }
  }

  /** The caller's callback starts on the connection: the checkout is over (or too late: then fail, so the connection goes back at once). */
  async entered<T>(fn: () => Promise<T>): Promise<T> {
    if (this.error) throw this.error;
    this.disarm();
    return fn();
  }

  async bound<T>(operation: () => Promise<T>): Promise<T> {
    if (this.error) throw this.error;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const expired = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(this.abort('a statement')), this.ms);
    });
    try {
      return await Promise.race([operation(), expired]);
    } finally {
      clearTimeout(timer);
    }
  }

  arm(what: string): void {
    this.disarm();
    this.timer = setTimeout(() => this.expire?.(this.abort(what)), this.ms);
  }

  private disarm(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private abort(what: string): StatementDeadlineError {
    if (!this.error) {
      this.error = new StatementDeadlineError(what, this.ms, this.connection);
      this.signal.abort(this.error);
    }
    return this.error;
  }
}
