/**
 * Everything the sample app reads from the environment. With nothing set it needs no
 * service at all: a memory idempotency store and an embedded SQLite database (sql.js).
 */
export interface SampleAppConfig {
  /** HTTP port; 0 picks a free one. @default 3000 */
  port: number;
  /** `REDIS_URL`: idempotency records (and tokens, locks) in Redis instead of process memory. @default undefined */
  redisUrl?: string;
  /** `DATABASE_URL`: business data in PostgreSQL instead of the embedded SQLite. @default undefined */
  databaseUrl?: string;
  /** `DATABASE_SCHEMA`: PostgreSQL schema of every table (created when missing). @default 'public' */
  databaseSchema?: string;
  /**
   * `SQLITE_FILE`: persist the embedded SQLite database to this file after every commit,
   * so that records and business data survive a crash (the demo uses it). Without it the
   * embedded database lives in memory.
   * @default undefined
   */
  sqliteFile?: string;
  /**
   * `SERVICES_FILE`: keep the state of the fake payment provider and mailer
   * (refunds/external-services.ts) in this JSON file, so that what they did survives a
   * crash of this process, as a real provider's would (the demo uses it). Without it
   * they live in memory.
   * @default undefined
   */
  servicesFile?: string;
  /** `AMQP_URL`: also consume `order.paid` events from RabbitMQ. @default undefined */
  amqpUrl?: string;
  /** `AMQP_QUEUE`: the RabbitMQ queue consumed when `AMQP_URL` is set. @default 'sample-app.order-events' */
  amqpQueue: string;
  /** `REDIS_PREFIX`: prefix of every Redis key, so several runs can share one Redis. @default 'sample-app:' */
  redisPrefix: string;
  /**
   * `SAMPLE_APP_DEMO_HOOKS=1`: honour the `X-Demo-Delay-Ms` request header, which holds a
   * refund webhook open inside its transaction, and `X-Demo-Pause-After-Step` on
   * `POST /refunds`, which holds a refund after one of its steps (the demo kills the
   * process there). Never enable it in production.
   * @default false
   */
  demoHooks: boolean;
  /** Opening balance of the demo account `acct_1`, in cents. @default 1000000 */
  openingBalance: number;
  /** Opening stock of every seeded SKU. @default 1000 */
  openingStock: number;
}

export function configFromEnv(env: NodeJS.ProcessEnv = process.env): SampleAppConfig {
  return {
    port: env.PORT === undefined ? 3000 : Number(env.PORT),
    redisUrl: env.REDIS_URL || undefined,
    databaseUrl: env.DATABASE_URL || undefined,
    databaseSchema: env.DATABASE_SCHEMA || undefined,
    sqliteFile: env.SQLITE_FILE || undefined,
    servicesFile: env.SERVICES_FILE || undefined,
    amqpUrl: env.AMQP_URL || undefined,
    amqpQueue: env.AMQP_QUEUE || 'sample-app.order-events',
    redisPrefix: env.REDIS_PREFIX || 'sample-app:',
    demoHooks: env.SAMPLE_APP_DEMO_HOOKS === '1',
    openingBalance: 1_000_000,
    openingStock: 1_000,
  };
}

/** One line for the startup log: which backends this process uses. */
export function describeBackends(config: SampleAppConfig): string {
  const records = config.redisUrl ? 'Redis' : 'memory';
  const database = config.databaseUrl ? 'PostgreSQL' : config.sqliteFile ? `SQLite file ${config.sqliteFile}` : 'in-memory SQLite';
  const messages = config.amqpUrl ? ', RabbitMQ consumer' : '';
  return `idempotency records: ${records}; business data: ${database}${messages}`;
}
