import type { ConnectionDeadline, IdempotentIsolationLevel, SqlConnection, SqlDatabase, SqlTransaction } from './port.js';
import type { SqlResult, Statement } from './statement.js';

/**
 * The client-side deadline of the SQL stores (`statementTimeout`): a stalled network path
 * or a database that stopped answering must give every request its 503 within a bound,
 * not hold it (and its pooled connection) until TCP gives up, minutes later.
 */
export const DEFAULT_STATEMENT_TIMEOUT_MS = 5_000;

/**
 * What a statement, a pool checkout or a COMMIT that ran past `statementTimeout` rejects
 * with. Its `code` is a socket's `ETIMEDOUT`, so `isConnectionLoss` (failures.ts) reads it
 * as the outage it is: `IdempotencyStoreUnavailableError`, HTTP 503, retriable.
 */
export class StatementDeadlineError extends Error {
  readonly code = 'ETIMEDOUT';

  constructor(what: string, ms: number) {
    super(
      `The database did not answer ${what} within statementTimeout (${ms} ms); its connection was discarded. ` +
        'Check the database and the network path to it, or raise statementTimeout if statements this slow are expected.',
    );
    this.name = 'StatementDeadlineError';
  }
}

const bounded = new WeakSet<object>();

/**
 * What runs when a deadline's signal aborts (`onDeadline`), kept here instead of as
 * `'abort'` listeners: on Node 20 an `addEventListener` / `removeEventListener` pair on an
 * AbortSignal costs about 6 µs, more than the rest of a bounded statement, and every
 * statement of a store registers one. Only signals of this module's deadlines are keys;
 * `onDeadline` listens on any other signal the usual way.
 */
const deadlineHooks = new WeakMap<AbortSignal, Array<() => void>>();
const noop = (): void => undefined;

/** A controller whose signal `onDeadline` watches cheaply. */
function deadlineController(): AbortController {
  const controller = new AbortController();
  deadlineHooks.set(controller.signal, []);
  return controller;
}

/** Aborts a deadline's controller with `error`, then runs what `onDeadline` registered on it. */
function abortDeadline(controller: AbortController, error: StatementDeadlineError): void {
  controller.abort(error);
  const hooks = deadlineHooks.get(controller.signal);
  if (!hooks) return;
  deadlineHooks.delete(controller.signal);
  for (const hook of hooks) hook();
}

/**
 * Calls `fn` when `signal` aborts (at once if it has), until the returned function is
 * called: how an implementation destroys the connection of a statement past its deadline.
 */
export function onDeadline(signal: AbortSignal | undefined, fn: () => void): () => void {
  if (!signal) return noop;
  if (signal.aborted) {
    fn();
    return noop;
  }
  const hooks = deadlineHooks.get(signal);
  if (hooks === undefined) {
    signal.addEventListener('abort', fn, { once: true });
    return () => signal.removeEventListener('abort', fn);
  }
  hooks.push(fn);
  return () => {
    const at = hooks.indexOf(fn);
    if (at >= 0) hooks.splice(at, 1);
  };
}

/**
 * `db` with every operation of the store bounded by `ms` (undefined: the default; 0: `db`
 * as it is): a statement on the pool, the checkout (and BEGIN) of a held connection, each
 * statement on it, and a transaction's COMMIT. Past the deadline the call rejects with
 * `StatementDeadlineError` and the implementation is told (an AbortSignal) to destroy the
 * connection. A database bounded already is returned as it is (a transaction of a store
 * goes through both the store's records and the transaction's entry).
 */
export function withDeadline<Tx extends SqlTransaction>(db: SqlDatabase<Tx>, ms: number | undefined): SqlDatabase<Tx> {
  const limit = ms ?? DEFAULT_STATEMENT_TIMEOUT_MS;
  if (limit === 0 || bounded.has(db)) return db;
  const decorated: SqlDatabase<Tx> = {
    identity: db.identity,
    run(statement: Statement): Promise<SqlResult> {
      const controller = deadlineController();
      return race(db.run(statement, controller.signal), limit, 'a statement', controller);
    },
    withConnection<T>(fn: (connection: SqlConnection) => Promise<T>): Promise<T> {
      const held = new HeldConnection(limit);
      return held.open((deadline) =>
        db.withConnection(
          (connection) => held.entered(() => fn({ run: (statement) => deadline.bound(() => connection.run(statement)) })),
          deadline,
        ),
      );
    },
    transaction<T>(isolation: IdempotentIsolationLevel | undefined, fn: (tx: Tx) => Promise<T>): Promise<T> {
      const held = new HeldConnection(limit);
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
  private readonly controller = deadlineController();
  readonly signal = this.controller.signal;
  private timer: ReturnType<typeof setTimeout> | undefined;
  private expire: ((error: StatementDeadlineError) => void) | undefined;
  private error: StatementDeadlineError | undefined;

  constructor(private readonly ms: number) {}

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
      this.error = new StatementDeadlineError(what, this.ms);
      abortDeadline(this.controller, this.error);
    }
    return this.error;
  }
}

/**
 * `promise`, or a `StatementDeadlineError` (and `controller` aborted) after `ms`. One
 * promise and one timer, settled by whichever comes first (a late settlement of the other
 * is ignored): the statement path of every store request runs through here.
 */
function race<T>(promise: Promise<T>, ms: number, what: string, controller: AbortController): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    const timer = setTimeout(() => {
      const error = new StatementDeadlineError(what, ms);
      abortDeadline(controller, error);
      reject(error);
    }, ms);
    promise.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (error: unknown) => {
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}
