import { MysqlDriver } from 'typeorm/driver/mysql/MysqlDriver.js';

/**
 * What a column of this library's entities becomes on the MySQL family (TypeORM's `mysql`
 * and `mariadb` drivers), where the portable declaration is not good enough.
 */
export interface MysqlColumnMapping {
  /** Column type on MySQL / MariaDB instead of the declared one (e.g. `mediumtext` for a declared `text`). */
  readonly type?: string;
  /**
   * Collation on MySQL / MariaDB: `'exact'` is a binary collation that also tells trailing
   * spaces apart (NO PAD), `'binary'` one that may ignore them (PAD SPACE, for values that
   * never end in a space). Only applied where the column declares no collation of its own.
   */
  readonly collation?: 'exact' | 'binary';
}

/**
 * The collations of a server. MariaDB's and MySQL 8's NO PAD binary collations have
 * different names (`utf8mb4_nopad_bin`, `utf8mb4_0900_bin`), and `utf8mb4_bin` is PAD SPACE
 * on both: `'a'` and `'a '` are equal under it. TypeORM keeps only the number of the
 * server's version (`10.11.19`, not `10.11.19-MariaDB`): MariaDB's numbers start at 10,
 * MySQL's are 5 to 9 so far. A wrong guess fails CREATE TABLE loudly ("Unknown collation").
 */
export function mysqlCollationsOf(version: string, driverType?: string): { exact: string; binary: string } {
  const mariadb = driverType === 'mariadb' || /mariadb/i.test(version) || Number(version.split('.')[0]) >= 10;
  return { exact: mariadb ? 'utf8mb4_nopad_bin' : 'utf8mb4_0900_bin', binary: 'utf8mb4_bin' };
}

/** Mappings per declaring class, then per property. */
const mappings = new WeakMap<Function, Map<string, MysqlColumnMapping>>();

/** The parts of TypeORM's ColumnMetadata (and TableColumn, which has neither target nor property) read here. */
interface NormalizedColumn {
  target?: unknown;
  propertyName?: string;
  collation?: string;
}

/**
 * Gives the column `propertyName` declared on `target` another type or collation on the
 * MySQL family. TypeORM fixes a column's type and collation when the class is decorated,
 * before any DataSource exists, and has no type that is a large text on every database
 * (`text` holds 64 KB on MySQL, `mediumtext` does not exist on PostgreSQL) nor a collation
 * name that every database knows. Every DDL TypeORM writes for a column, its schema diff
 * and its entity validation go through the driver's `normalizeType`, so that one method of
 * the MySQL driver is wrapped (once) to answer for the columns registered here; every other
 * column, and every other driver, gets exactly what TypeORM answers. `verify()` of the
 * store checks the table whatever made it, so a copy of TypeORM this wrapper did not reach
 * is refused at boot rather than trusted.
 */
export function mapColumnOnMysql(target: Function, propertyName: string, mapping: MysqlColumnMapping): void {
  installNormalizeTypeHook();
  let byProperty = mappings.get(target);
  if (!byProperty) mappings.set(target, (byProperty = new Map()));
  byProperty.set(propertyName, mapping);
}

let installed = false;

function installNormalizeTypeHook(): void {
  if (installed) return;
  installed = true;
  const prototype = (MysqlDriver as unknown as { prototype: MysqlDriverLike } | undefined)?.prototype;
  if (!prototype || typeof prototype.normalizeType !== 'function') return;
  const original = prototype.normalizeType;
  prototype.normalizeType = function normalizeType(this: MysqlDriverLike, column: NormalizedColumn) {
    const mapping =
      typeof column?.target === 'function' && column.propertyName !== undefined
        ? mappings.get(column.target)?.get(column.propertyName)
        : undefined;
    if (!mapping) return original.call(this, column);
    // The metadata is this DataSource's own copy: setting its collation here (the entity
    // validator normalizes every column before any DDL is built) reaches CREATE TABLE.
    if (mapping.collation && !column.collation)
      column.collation = mysqlCollationsOf(String(this.version ?? ''), this.options?.type)[mapping.collation];
    return mapping.type ?? original.call(this, column);
  };
}

interface MysqlDriverLike {
  version?: string;
  options?: { type?: string };
  normalizeType(column: NormalizedColumn): string;
}
