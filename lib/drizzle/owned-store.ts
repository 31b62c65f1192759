import { IdempotencyConfigurationError, isIdempotencyError } from '../core/errors.js';
import { checkWholeNumber } from '../core/options.js';
import type { StoreRequirements } from '../core/store.js';
import type { TableFixes } from '../sql/failures.js';
import { secretsOf, waitForServer, type OwnedServer } from '../sql/owned-server.js';
import { DRIZZLE_TABLE_FIXES } from './record-dialect.js';
import { DrizzleIdempotencyStore } from './store.js';
import type { DrizzleIdempotencyStoreOptions } from './store-options.js';

/** The drivers `createDrizzleIdempotencyStore` opens a pool with: node-postgres or mysql2. */
export type OwnedDrizzleDialect = 'postgres' | 'mysql';

/** Options of `createDrizzleIdempotencyStore`: where the database is, and the store's own options. */
export interface OwnedDrizzleIdempotencyStoreOptions extends DrizzleIdempotencyStoreOptions {
  /**
   * Where the database is: `postgres://user:password@host:5432/database` (or `postgresql://`)
   * for node-postgres, `mysql://...` or `mariadb://...` for mysql2.
   * @default none: required
   */
  url: string;
  /**
   * The driver.
   * @default from the url's scheme: 'postgres' for postgres:// and postgresql://, 'mysql' for mysql:// and mariadb://
   */
  dialect?: OwnedDrizzleDialect;
  /**
   * Most connections the pool opens (node-postgres `max`, mysql2 `connectionLimit`). A
   * transactional request holds one for its whole handler, any other request one per statement.
   * @default 10
   */
  poolSize?: number;
  /**
   * How long, ms, the boot (`app.init()`) keeps trying to reach a database that is not
   * answering yet (a container still starting) before it stops with an
   * `IdempotencyConfigurationError` naming the server. A wrong
   * user or password, or a database that does not exist, stops it at once. `0`: one attempt.
   * @default 10_000
   */
  readyTimeout?: number;
  /**
   * How long, ms, opening one connection may take (at boot and whenever the pool opens one later).
   * @default 5_000
   */
  connectTimeout?: number;
  /**
   * Create the idempotency tables that are missing at boot (`ensureTable()`), for a database
   * the library has to itself. Off: the boot checks the tables (`verify()`) and refuses to
   * start when they are missing or are not the library's, naming the fix.
   * @default false
   */
  ensureTable?: boolean;
  /**
   * PostgreSQL `application_name` of every connection (what `pg_stat_activity` shows).
   * @default 'nestjs-idempotency'
   */
  applicationName?: string;
  /**
   * More options of the pool (node-postgres `PoolConfig`: `ssl`, `idleTimeoutMillis`, ...;
   * mysql2 `PoolOptions`: `ssl`, `timezone`, ...), applied over the ones this function chooses.
   * @default none
   */
  poolOptions?: Readonly<Record<string, unknown>>;
}

/** The pool the store made, as both drivers offer it. */
interface OwnedPool {
  query(sql: string): Promise<unknown>;
  end(): Promise<void>;
}

/** A store that made its pool: the boot waits for it, closing the store ends it. */
class OwnedDrizzleIdempotencyStore extends DrizzleIdempotencyStore {
  private ready: Promise<void> | undefined;
  private closing: Promise<void> | undefined;

  constructor(
    db: object,
    private readonly owned: { pool: OwnedPool; server: OwnedServer; readyTimeout: number; ensureTable: boolean; secrets: string[] },
    options: DrizzleIdempotencyStoreOptions,
  ) {
    super(db, options);
  }

  /** The boot check: waits for the database (up to `readyTimeout`), creates the missing tables when asked, then checks them. */
  override async verify(requirements?: StoreRequirements): Promise<void> {
    try {
      await (this.ready ??= this.waitForDatabase());
      if (this.owned.ensureTable) await this.ensureTable();
      await super.verify(requirements);
    } catch (error) {
      // A store that can never start ends its pool, so the process can exit; an outage keeps it, and it reconnects.
      if (isIdempotencyError(error) && error.code === 'IDEMPOTENCY_CONFIGURATION_ERROR') await this.endPool();
      throw error;
    }
  }

  /** Stops the purge job, then ends the pool this store made. Safe to call more than once. */
  override async close(): Promise<void> {
    await super.close();
    await this.endPool();
  }

  protected override tableFixes(): TableFixes {
    return {
      missingTable: (name) =>
        `Pass ensureTable: true to createDrizzleIdempotencyStore to create the missing tables at boot, ` +
        `or create them with drizzle-kit from idempotencyPgTables('${name}') / idempotencyMysqlTables('${name}') in your schema.`,
      missingColumn: DRIZZLE_TABLE_FIXES.missingColumn,
    };
  }

  private waitForDatabase(): Promise<void> {
    const { pool, readyTimeout, server, secrets } = this.owned;
    const boot = { owner: 'createDrizzleIdempotencyStore', server, readyTimeout, secrets };
    return waitForServer(
      boot,
      async () => void (await pool.query('SELECT 1')),
      () => this.closing !== undefined,
    );
  }

  private endPool(): Promise<void> {
    return (this.closing ??= this.owned.pool.end().catch(() => {}));
  }
}

const SCHEMES: Record<string, OwnedDrizzleDialect> = {
  'postgres:': 'postgres',
  'postgresql:': 'postgres',
  'mysql:': 'mysql',
  'mariadb:': 'mysql',
};

/**
 * A Drizzle store that owns its pool: a node-postgres or mysql2 pool made here from `url`
 * (bounded size, connect timeout, keep-alive; node-postgres's `'error'` events taken, so a
 * connection the server ends never kills the process), Drizzle on it, waited for at boot by
 * `IdempotencyModule` (up to `readyTimeout`; a database that does not answer by then stops
 * `app.init()` with an error naming the server, never the password), its tables checked (or
 * created, with `ensureTable: true`), and ended when the module closes (`app.close()`,
 * SIGTERM with `enableShutdownHooks()`). The driver and drizzle-orm are loaded here, when
 * called: install `pg` or `mysql2`. To write your tables in the record's transaction
 * (`@Idempotent({ transactional: true })`), pass your own database to
 * `new DrizzleIdempotencyStore(db)` instead.
 *
 * @example
 * IdempotencyModule.forRootAsync({
 *   isGlobal: true,
 *   useFactory: async () => ({ store: await createDrizzleIdempotencyStore({ url: process.env.DATABASE_URL!, ensureTable: true }) }),
 * })
 */
export async function createDrizzleIdempotencyStore(options: OwnedDrizzleIdempotencyStoreOptions): Promise<DrizzleIdempotencyStore> {
  const {
    url,
    dialect: givenDialect,
    poolSize = 10,
    readyTimeout = 10_000,
    connectTimeout = 5_000,
    ensureTable = false,
    applicationName = 'nestjs-idempotency',
    poolOptions = {},
    ...storeOptions
  } = options ?? ({} as OwnedDrizzleIdempotencyStoreOptions);
  const owner = 'createDrizzleIdempotencyStore';
  checkWholeNumber(owner, 'poolSize', poolSize, { min: 1, example: '10' });
  checkWholeNumber(owner, 'readyTimeout', readyTimeout, { unit: 'ms', min: 0, example: '10_000' });
  checkWholeNumber(owner, 'connectTimeout', connectTimeout, { unit: 'ms', min: 1, example: '5_000' });
  const parsed = parseUrl(url);
  const dialect = givenDialect ?? SCHEMES[parsed.protocol];
  if (dialect !== 'postgres' && dialect !== 'mysql') {
    throw new IdempotencyConfigurationError(
      `${owner}: cannot tell which driver to use (dialect ${givenDialect === undefined ? 'not given' : `'${String(givenDialect)}'`}, url scheme '${parsed.protocol}').`,
      "Give a url starting with postgres://, mysql:// or mariadb://, or dialect: 'postgres' | 'mysql'.",
    );
  }
  const server: OwnedServer = { type: parsed.protocol.slice(0, -1), url: parsed };
  const secrets = secretsOf(parsed, poolOptions.password);
  const { pool, db } =
    dialect === 'postgres'
      ? await postgresPool(url, {
          max: poolSize,
          connectionTimeoutMillis: connectTimeout,
          application_name: applicationName,
          keepAlive: true,
        })
      : await mysqlPool(parsed, { connectionLimit: poolSize, connectTimeout, enableKeepAlive: true });
  const store = (() => {
    try {
      return new OwnedDrizzleIdempotencyStore(db, { pool, server, readyTimeout, ensureTable, secrets }, storeOptions);
    } catch (error) {
      void pool.end().catch(() => {});
      throw error;
    }
  })();
  return store;

  async function postgresPool(connectionString: string, recommended: Record<string, unknown>) {
    const pg = await load<{ Pool?: PoolClass; default?: { Pool?: PoolClass } }>('pg', () => import('pg'));
    const Pool = pg.Pool ?? pg.default?.Pool;
    const { drizzle } = await load<{ drizzle: (client: unknown) => object }>('drizzle-orm', () => import('drizzle-orm/node-postgres'));
    const created = new Pool!({ connectionString, ...recommended, ...poolOptions });
    return { pool: created, db: drizzle(created) };
  }

  async function mysqlPool(where: URL, recommended: Record<string, unknown>) {
    const mysql = await load<{ createPool?: (config: object) => OwnedPool; default?: { createPool?: (config: object) => OwnedPool } }>(
      'mysql2',
      () => import('mysql2/promise'),
    );
    const createPool = mysql.createPool ?? mysql.default?.createPool;
    const { drizzle } = await load<{ drizzle: (client: unknown) => object }>('drizzle-orm', () => import('drizzle-orm/mysql2'));
    // mysql2 reads mysql:// URLs; mariadb:// is the same server protocol.
    const uri = where.protocol === 'mariadb:' ? `mysql:${where.href.slice('mariadb:'.length)}` : where.href;
    const created = createPool!({ uri, ...recommended, ...poolOptions });
    return { pool: created, db: drizzle(created) };
  }
}

type PoolClass = new (config: object) => OwnedPool;

async function load<T>(name: string, importer: () => Promise<unknown>): Promise<T> {
  try {
    return (await importer()) as T;
  } catch (error) {
    throw new IdempotencyConfigurationError(
      `createDrizzleIdempotencyStore opens its own pool, and ${name} is not installed.`,
      `Run npm install ${name} (drizzle-orm with pg for PostgreSQL, with mysql2 for MySQL / MariaDB), or pass your own Drizzle database to new DrizzleIdempotencyStore(db).`,
      { cause: error },
    );
  }
}

function parseUrl(url: unknown): URL {
  try {
    if (typeof url !== 'string') throw new TypeError('not a string');
    return new URL(url);
  } catch {
    throw new IdempotencyConfigurationError(
      `createDrizzleIdempotencyStore: url must be a database URL, got ${typeof url === 'string' ? 'a string that does not parse' : typeof url}.`,
      "Write url: 'postgres://user:password@host:5432/database' (or mysql://, mariadb://), e.g. process.env.DATABASE_URL, and check that the variable is set.",
    );
  }
}
