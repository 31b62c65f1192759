import { DataSource, type DataSourceOptions } from 'typeorm';
import { IdempotencyConfigurationError, isIdempotencyError } from '../core/errors.js';
import { checkWholeNumber } from '../core/options.js';
import type { StoreRequirements } from '../core/store.js';
import type { TableFixes } from '../sql/failures.js';
import { TypeOrmIdempotencyStore } from './store/store.js';
import type { TypeOrmIdempotencyStoreOptions } from './store/store-options.js';
import { TYPEORM_TABLE_FIXES } from './store/table-fixes.js';
import { closedBeforeReady, secretsOf, waitForServer, type OwnedServer } from '../sql/owned-server.js';

/** The databases `createTypeOrmIdempotencyStore` opens a DataSource on. */
export type OwnedTypeOrmDatabaseType = 'postgres' | 'mariadb' | 'mysql';

/**
 * Options of `createTypeOrmIdempotencyStore`: where the database is, and the store's own
 * options (not `entity`: the DataSource it makes has no entities of yours; use `tableName`).
 */
export interface OwnedTypeOrmIdempotencyStoreOptions extends Omit<TypeOrmIdempotencyStoreOptions, 'entity'> {
  /**
   * Where the database is: `postgres://user:password@host:5432/database` (or `postgresql://`),
   * `mysql://...` or `mariadb://...`. Leave it out to give `host`, `port`, ... in `dataSourceOptions`.
   * @default none
   */
  url?: string;
  /**
   * The TypeORM driver.
   * @default from the url's scheme: 'postgres' for postgres:// and postgresql://, 'mysql' for mysql://, 'mariadb' for mariadb://
   */
  type?: OwnedTypeOrmDatabaseType;
  /**
   * Most connections the DataSource's pool opens. A transactional request holds one for its
   * whole handler, any other request one per statement.
   * @default 10
   */
  poolSize?: number;
  /**
   * How long, ms, the boot (`app.init()`) keeps trying to connect to a database that is not
   * answering yet (a container still starting) before it stops with an
   * `IdempotencyConfigurationError` naming the server. A wrong
   * user or password, or a database that does not exist, stops it at once. At least one attempt is made; each one
   * gives up after `connectTimeout`.
   * @default 10_000
   */
  readyTimeout?: number;
  /**
   * How long, ms, one connection attempt may take (at boot and for every connection the pool opens later).
   * @default 5_000
   */
  connectTimeout?: number;
  /**
   * Create the idempotency tables that are missing at boot (`ensureTable()`), for a database
   * the library has to itself. Off: the boot checks the tables (`verify()`) and refuses to
   * start when they are missing or are not the library's, naming the fix; the library never
   * guesses at a database it does not know to be its own.
   * @default false
   */
  ensureTable?: boolean;
  /**
   * PostgreSQL `application_name` of every connection (what `pg_stat_activity` shows).
   * @default 'nestjs-idempotency'
   */
  applicationName?: string;
  /**
   * More TypeORM options (`host`, `port`, `username`, `password`, `database`, `schema`,
   * `ssl`, `extra`, ...), applied over the ones this function chooses. `type`, `entities`,
   * `synchronize` and `migrationsRun` are the library's.
   * @default none
   */
  dataSourceOptions?: Readonly<Record<string, unknown>>;
}

/** A store that made its DataSource: the boot opens it, closing the store destroys it. */
class OwnedTypeOrmIdempotencyStore extends TypeOrmIdempotencyStore {
  private connecting: Promise<void> | undefined;
  private closing: Promise<void> | undefined;

  constructor(
    dataSource: DataSource,
    private readonly owned: { server: OwnedServer; readyTimeout: number; ensureTable: boolean; secrets: string[] },
    options: TypeOrmIdempotencyStoreOptions,
  ) {
    super(dataSource, options);
  }

  /** The boot check: connects (waiting up to `readyTimeout`), creates the missing tables when asked, then checks them. */
  override async verify(requirements?: StoreRequirements): Promise<void> {
    try {
      await (this.connecting ??= this.connect());
      if (this.owned.ensureTable) await this.ensureTable();
      await super.verify(requirements);
    } catch (error) {
      // A store that can never start ends what it opened, so the process can exit; an outage keeps the pool, which reconnects.
      if (isIdempotencyError(error) && error.code === 'IDEMPOTENCY_CONFIGURATION_ERROR') await this.destroyDataSource();
      throw error;
    }
  }

  /** Stops the purge job, then destroys the DataSource this store made. Safe to call more than once. */
  override async close(): Promise<void> {
    await super.close();
    await (this.closing ??= this.destroyDataSource());
  }

  protected override tableFixes(): TableFixes {
    return {
      missingTable: (name) =>
        `Pass ensureTable: true to createTypeOrmIdempotencyStore to create the missing tables at boot, ` +
        `or run the CreateIdempotencyTables1700000000000 migration on this database (createIdempotencyTablesMigration({ tableName: '${name}' }) for this name).`,
      missingColumn: TYPEORM_TABLE_FIXES.missingColumn,
    };
  }

  private connect(): Promise<void> {
    const { readyTimeout, server, secrets } = this.owned;
    const boot = { owner: 'createTypeOrmIdempotencyStore', server, readyTimeout, secrets };
    const attempt = async () => {
      try {
        await this.dataSource.initialize();
      } catch (error) {
        await this.dropDriver();
        throw error;
      }
      if (!this.closing) return;
      await this.destroyDataSource();
      throw closedBeforeReady(boot);
    };
    return waitForServer(boot, attempt, () => this.closing !== undefined);
  }

  /** A failed initialize() leaves the driver's pool behind (TypeORM destroys only what it had initialised): end it. */
  private async dropDriver(): Promise<void> {
    const driver = this.dataSource.driver as { disconnect?: () => Promise<void> } | undefined;
    await driver?.disconnect?.().catch(() => {});
  }

  private async destroyDataSource(): Promise<void> {
    if (this.dataSource.isInitialized) await this.dataSource.destroy().catch(() => this.dropDriver());
  }
}

const SCHEMES: Record<string, OwnedTypeOrmDatabaseType> = {
  'postgres:': 'postgres',
  'postgresql:': 'postgres',
  'mysql:': 'mysql',
  'mariadb:': 'mariadb',
};

/**
 * A TypeORM store that owns its `DataSource`: made here from `url` (or `dataSourceOptions`)
 * with a bounded pool and connect timeout, opened at boot by `IdempotencyModule` (trying for
 * up to `readyTimeout`; a database that does not answer by then stops `app.init()` with an
 * error naming the server, never the password), its tables checked (or created, with
 * `ensureTable: true`), and destroyed when the module closes (`app.close()`, SIGTERM with
 * `enableShutdownHooks()`). For a database used for idempotency alone, or an application
 * that does not want to wire its own DataSource into the module. To share the application's
 * DataSource (transactional handlers writing your tables with the record), pass it to
 * `new TypeOrmIdempotencyStore(dataSource)` instead.
 *
 * @example
 * IdempotencyModule.forRoot({
 *   isGlobal: true,
 *   store: createTypeOrmIdempotencyStore({ url: process.env.DATABASE_URL, ensureTable: true }),
 * })
 */
export function createTypeOrmIdempotencyStore(options: OwnedTypeOrmIdempotencyStoreOptions = {}): TypeOrmIdempotencyStore {
  const {
    url,
    type: givenType,
    poolSize = 10,
    readyTimeout = 10_000,
    connectTimeout = 5_000,
    ensureTable = false,
    applicationName = 'nestjs-idempotency',
    dataSourceOptions = {},
    ...storeOptions
  } = options;
  const owner = 'createTypeOrmIdempotencyStore';
  checkWholeNumber(owner, 'poolSize', poolSize, { min: 1, example: '10' });
  checkWholeNumber(owner, 'readyTimeout', readyTimeout, { unit: 'ms', min: 0, example: '10_000' });
  checkWholeNumber(owner, 'connectTimeout', connectTimeout, { unit: 'ms', min: 1, example: '5_000' });
  if ((storeOptions as TypeOrmIdempotencyStoreOptions).entity !== undefined) {
    throw new IdempotencyConfigurationError(
      `${owner}: the entity option names a class of your DataSource, and this store makes its own DataSource, which has none.`,
      "Give the table's name instead (tableName: 'billing.idempotency_records'), or pass your DataSource to new TypeOrmIdempotencyStore(dataSource, { entity }).",
    );
  }
  const parsed = parseUrl(url);
  const type = givenType ?? (parsed && SCHEMES[parsed.protocol]);
  if (type !== 'postgres' && type !== 'mysql' && type !== 'mariadb') {
    throw new IdempotencyConfigurationError(
      `${owner}: cannot tell which database to open (type ${givenType === undefined ? 'not given' : `'${String(givenType)}'`}, url ${parsed ? `scheme '${parsed.protocol}'` : 'not given'}).`,
      "Give a url starting with postgres://, mysql:// or mariadb://, or type: 'postgres' | 'mysql' | 'mariadb' with host, port, username, password and database in dataSourceOptions. For SQLite, pass your DataSource to new TypeOrmIdempotencyStore(dataSource).",
    );
  }
  const recommended: Record<string, unknown> =
    type === 'postgres'
      ? { applicationName, connectTimeoutMS: connectTimeout, extra: { keepAlive: true } }
      : { connectTimeout, extra: { enableKeepAlive: true } };
  const given = dataSourceOptions as Record<string, unknown>;
  const dataSource = new DataSource({
    ...recommended,
    ...(url === undefined ? {} : { url }),
    poolSize,
    ...given,
    extra: { ...(recommended.extra as object), ...(given.extra as object | undefined) },
    type,
    entities: [],
    synchronize: false,
    migrationsRun: false,
  } as DataSourceOptions);
  const server: OwnedServer = parsed
    ? { type, url: parsed }
    : {
        type,
        host: given.host as string | undefined,
        port: given.port as number | undefined,
        database: given.database as string | undefined,
      };
  const secrets = secretsOf(parsed, given.password);
  return new OwnedTypeOrmIdempotencyStore(dataSource, { server, readyTimeout, ensureTable, secrets }, storeOptions);
}

function parseUrl(url: string | undefined): URL | undefined {
  if (url === undefined) return undefined;
  try {
    if (typeof url !== 'string') throw new TypeError('not a string');
    return new URL(url);
  } catch {
    throw new IdempotencyConfigurationError(
      `createTypeOrmIdempotencyStore: url is not a URL (${typeof url === 'string' ? 'it does not parse' : typeof url}).`,
      "Write url: 'postgres://user:password@host:5432/database' (or mysql://, mariadb://), e.g. process.env.DATABASE_URL, and check that the variable is set.",
    );
  }
}
