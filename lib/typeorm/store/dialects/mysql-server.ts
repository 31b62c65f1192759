import type { DataSource } from 'typeorm';

/** What the server said it is, per DataSource (a promise, so concurrent first calls share one query). */
const returningByDataSource = new WeakMap<DataSource, Promise<boolean>>();

/**
 * THE place where MySQL and MariaDB part ways: true when the server takes `INSERT ...
 * RETURNING` (MariaDB 10.5 and later), read once per DataSource from `SELECT VERSION()`.
 * Asked of the server rather than of `options.type`, because a `mysql` DataSource often
 * points at MariaDB. A failed query is not remembered (the next call asks again).
 */
export function claimReturningOf(dataSource: DataSource): Promise<boolean> {
  let known = returningByDataSource.get(dataSource);
  if (!known) {
    known = (async () => {
      const rows = (await dataSource.query('SELECT VERSION() AS version')) as Array<{ version: string }>;
      return supportsInsertReturning(String(rows[0]?.version ?? ''));
    })();
    returningByDataSource.set(dataSource, known);
    known.catch(() => returningByDataSource.delete(dataSource));
  }
  return known;
}

/** `10.11.6-MariaDB-0+deb12u1` yes (10.5+); `8.0.36`, `8.4.3-standard` no. */
export function supportsInsertReturning(version: string): boolean {
  if (!/mariadb/i.test(version)) return false;
  const [major, minor] = version.split(/[.-]/).map(Number);
  return major > 10 || (major === 10 && minor >= 5);
}

/** @internal Tests only: answer `claimReturningOf` for this DataSource without asking (to run MySQL 8's statements on MariaDB). */
export function assumeClaimReturning(dataSource: DataSource, returning: boolean): void {
  returningByDataSource.set(dataSource, Promise.resolve(returning));
}
