import type { SqlDatabase } from '../port.js';
import { plain } from '../statement.js';

/**
 * What the server said it is, per database (`SqlDatabase.identity`; a promise, so
 * concurrent first calls share one query).
 */
const returningByDatabase = new WeakMap<object, Promise<boolean>>();

/**
 * THE place where MySQL and MariaDB part ways: true when the server takes `INSERT ...
 * RETURNING` (MariaDB 10.5 and later), read once per database from `SELECT VERSION()`.
 * Asked of the server rather than of the configuration, because a `mysql` DataSource (or
 * connection string) often points at MariaDB. A failed query is not remembered (the next
 * call asks again).
 */
export function claimReturningOf(db: SqlDatabase): Promise<boolean> {
  let known = returningByDatabase.get(db.identity);
  if (!known) {
    known = (async () => {
      const { rows } = await db.run(plain('SELECT VERSION() AS version'));
      return supportsInsertReturning(String(rows[0]?.version ?? ''));
    })();
    returningByDatabase.set(db.identity, known);
    known.catch(() => returningByDatabase.delete(db.identity));
  }
  return known;
}

/** `10.11.6-MariaDB-0+deb12u1` yes (10.5+); `8.0.36`, `8.4.3-standard` no. */
export function supportsInsertReturning(version: string): boolean {
  if (!/mariadb/i.test(version)) return false;
  const [major, minor] = version.split(/[.-]/).map(Number);
  return major > 10 || (major === 10 && minor >= 5);
}

/**
 * @internal Tests only: answer `claimReturningOf` for this database (its identity: the
 * DataSource, the PrismaClient...) without asking (to run MySQL 8's statements on MariaDB).
 */
export function assumeClaimReturning(identity: object, returning: boolean): void {
  returningByDatabase.set(identity, Promise.resolve(returning));
}
