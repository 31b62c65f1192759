import { DeadlineSignal, onDeadline } from '../../lib/sql/deadline-signal.js';
import { StatementDeadlineError, withDeadline } from '../../lib/sql/deadline.js';
import type { SqlConnection, SqlDatabase, SqlTransaction } from '../../lib/sql/port.js';
import type { SqlResult, Statement } from '../../lib/sql/statement.js';

// The deadline's own bookkeeping (lib/sql/deadline.ts): what runs when a statement passes
// statementTimeout, and what must not. The SQL fault suites show it on real stalled
// connections; here the port is a database whose answers the test releases by hand, so
// each case can hold a statement past the deadline or answer it in time.

const statement: Statement = { name: undefined, sql: 'SELECT 1', params: [] };
const answer: SqlResult = { rows: [], affected: 0 };

/** A database whose statements answer only when `release()` is called; the signals it was given are kept. */
function heldDatabase() {
  const signals: DeadlineSignal[] = [];
  const pending: Array<() => void> = [];
  const db: SqlDatabase = {
    identity: {},
    run(_statement: Statement, signal?: DeadlineSignal) {
      if (signal) signals.push(signal);
      return new Promise<SqlResult>((resolve) => pending.push(() => resolve(answer)));
    },
    withConnection<T>(fn: (connection: SqlConnection) => Promise<T>) {
      return fn({ run: () => Promise.resolve(answer) });
    },
    transaction<T>(_isolation: unknown, fn: (tx: SqlTransaction) => Promise<T>) {
      return fn({ run: () => Promise.resolve(answer) } as unknown as SqlTransaction);
    },
  };
  return { db, signals, release: () => pending.splice(0).forEach((resolve) => resolve()) };
}

describe('statementTimeout: DeadlineSignal and onDeadline', () => {
  it('runs a hook registered on a statement’s signal once, when the statement passes its deadline', async () => {
    const { db, signals } = heldDatabase();
    const calls: string[] = [];
    const running = withDeadline(db, 20).run(statement);
    onDeadline(signals[0], () => calls.push('discard'));
    await expect(running).rejects.toBeInstanceOf(StatementDeadlineError);
    expect({ calls, aborted: signals[0].aborted }).toEqual({ calls: ['discard'], aborted: true });
  });

  it('does not run a hook whose remover was called before the deadline, and still runs the others', async () => {
    const { db, signals } = heldDatabase();
    const calls: string[] = [];
    const running = withDeadline(db, 20).run(statement);
    const removeFirst = onDeadline(signals[0], () => calls.push('first'));
    onDeadline(signals[0], () => calls.push('second'));
    removeFirst();
    await expect(running).rejects.toBeInstanceOf(StatementDeadlineError);
    expect(calls).toEqual(['second']);
  });

  it('runs nothing for a statement answered in time', async () => {
    const { db, signals, release } = heldDatabase();
    const calls: string[] = [];
    const running = withDeadline(db, 50).run(statement);
    onDeadline(signals[0], () => calls.push('discard'));
    release();
    await expect(running).resolves.toEqual(answer);
    // Past the deadline that would have fired: a second statement held beyond it shows the timer ran out.
    const later = withDeadline(db, 60).run(statement);
    await expect(later).rejects.toBeInstanceOf(StatementDeadlineError);
    expect({ calls, aborted: signals[0].aborted }).toEqual({ calls: [], aborted: false });
  });

  it('runs each hook once, whatever aborts the signal and however often; none without a signal', () => {
    const calls: string[] = [];
    const signal = new DeadlineSignal();
    const removed = onDeadline(signal, () => calls.push('removed'));
    onDeadline(signal, () => calls.push('kept'));
    removed();
    removed();
    signal.abort(new Error('first'));
    signal.abort(new Error('second'));
    onDeadline(signal, () => calls.push('late'));
    expect({ calls, reason: signal.reason?.message }).toEqual({ calls: ['kept', 'late'], reason: 'first' });
    onDeadline(undefined, () => calls.push('never'))();
    expect(calls).toEqual(['kept', 'late']);
  });

  it('runs a hook registered after the deadline passed at once', async () => {
    const { db, signals } = heldDatabase();
    await expect(withDeadline(db, 10).run(statement)).rejects.toBeInstanceOf(StatementDeadlineError);
    const calls: string[] = [];
    onDeadline(signals[0], () => calls.push('discard'));
    expect(calls).toEqual(['discard']);
  });
});
