/**
 * The floor of each store path: the bench's handler made idempotent BY HAND, on the same
 * client or pool as the library's store, with exactly the round trips the protocol needs
 * and nothing else, so that `library ÷ floor` says how far the library is from the least
 * any library could do on that store (bench/run.ts reports the ratios).
 *
 * The contract is the library's, written the simplest way: read the `Idempotency-Key`
 * header, SHA-256 of the JSON body as the fingerprint, one claim that either takes the
 * key or answers what is stored under it, the handler, one completion that stores the
 * status and the JSON; a duplicate gets the stored body with `Idempotent-Replayed: true`,
 * 422 on another body, 409 while the first is in flight. Round trips:
 *
 * | store | first execution | replay |
 * |---|---|---|
 * | memory | `Map` get + set, set | `Map` get |
 * | Redis | `SET k v NX PX ttl GET`, `SET k v XX PX ttl` | `SET ... NX PX ttl GET` |
 * | PostgreSQL | claim (named prepared `INSERT ... ON CONFLICT DO NOTHING` + read of the live row in one statement), `UPDATE` (prepared) | the claim |
 * | MariaDB | `INSERT ... ON DUPLICATE KEY UPDATE ... RETURNING`, `UPDATE` (text protocol, as the store sends) | the claim |
 *
 * What the floor leaves out is what the library adds on purpose: leases and their
 * renewal, expiry by the database clock, the response's headers, size limits, scopes,
 * events and metrics. The ratios measure what those cost.
 */
import {
  ConflictException,
  UnprocessableEntityException,
  type CallHandler,
  type ExecutionContext,
  type NestInterceptor,
} from '@nestjs/common';
import { createHash, randomUUID } from 'node:crypto';
import { from, lastValueFrom, type Observable } from 'rxjs';

/** The floor routes, by the library store they are the floor of. */
export type FloorName = 'floor-memory' | 'floor-redis' | 'floor-postgres' | 'floor-mariadb';

/** What is stored under a key: the claimer's fingerprint, and once completed its answer. */
export interface FloorRecord {
  fingerprint: string;
  /** Absent while the first execution runs. */
  status?: number;
  body?: string;
}

/** The two round trips of the protocol on one backend. */
export interface FloorBackend {
  /** Takes `key` (undefined) or answers what is stored under it, in one round trip. */
  claim(key: string, fingerprint: string, ttlMs: number): Promise<FloorRecord | undefined>;
  complete(key: string, record: Required<FloorRecord>, ttlMs: number): Promise<void>;
}

/** The hand-written interceptor of a floor route, the same over every backend. */
export class FloorInterceptor implements NestInterceptor {
  constructor(
    private readonly backend: FloorBackend,
    private readonly ttlMs: number,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const http = context.switchToHttp();
    const request = http.getRequest<{ headers: Record<string, string | string[] | undefined>; body: unknown }>();
    const key = request.headers['idempotency-key'];
    if (typeof key !== 'string') return next.handle();
    return from(this.run(key, request.body, http.getResponse(), next));
  }

  private async run(key: string, body: unknown, response: FloorResponse, next: CallHandler): Promise<unknown> {
    const fingerprint = createHash('sha256').update(JSON.stringify(body)).digest('base64url');
    const stored = await this.backend.claim(key, fingerprint, this.ttlMs);
    if (stored === undefined) {
      const value = await lastValueFrom(next.handle());
      await this.backend.complete(key, { fingerprint, status: 201, body: JSON.stringify(value) }, this.ttlMs);
      return value;
    }
    if (stored.fingerprint !== fingerprint) throw new UnprocessableEntityException('Idempotency-Key reused with another body');
    if (stored.body === undefined || stored.status === undefined) throw new ConflictException('The first request is in flight');
    response.status(stored.status);
    response.header('idempotent-replayed', 'true');
    return JSON.parse(stored.body);
  }
}

/** Express's response and Fastify's reply both have these two. */
interface FloorResponse {
  status(code: number): unknown;
  header(name: string, value: string): unknown;
}

/** The memory floor: one `Map`, entries never expire (the bench runs for minutes). */
export function memoryFloor(): FloorBackend {
  const records = new Map<string, FloorRecord>();
  return {
    claim: async (key, fingerprint) => {
      const stored = records.get(key);
      if (stored !== undefined) return stored;
      records.set(key, { fingerprint });
      return undefined;
    },
    complete: async (key, record) => {
      records.set(key, record);
    },
  };
}

/** The commands of an ioredis client the Redis floor sends. */
export interface FloorRedisClient {
  call(command: string, ...args: (string | number)[]): Promise<unknown>;
}

/**
 * The Redis floor: the value is `<fingerprint>\n<status>\n<body>` (status and body empty
 * while in flight). `SET ... NX GET` (Redis 7) sets only an absent key and answers the old
 * value, so claim and replay are one command each.
 */
export function redisFloor(client: FloorRedisClient, prefix: string): FloorBackend {
  return {
    claim: async (key, fingerprint, ttlMs) => {
      const old = (await client.call('SET', prefix + key, `${fingerprint}\n\n`, 'NX', 'PX', ttlMs, 'GET')) as string | null;
      if (old === null) return undefined;
      const first = old.indexOf('\n');
      const second = old.indexOf('\n', first + 1);
      const status = old.slice(first + 1, second);
      return status === ''
        ? { fingerprint: old.slice(0, first) }
        : { fingerprint: old.slice(0, first), status: Number(status), body: old.slice(second + 1) };
    },
    complete: async (key, record, ttlMs) => {
      await client.call('SET', prefix + key, `${record.fingerprint}\n${record.status}\n${record.body}`, 'XX', 'PX', ttlMs);
    },
  };
}

/** A node-postgres pool, as the PostgreSQL floor uses it. */
export interface FloorPgPool {
  query(config: { name?: string; text: string; values?: unknown[] }): Promise<{ rows: Record<string, unknown>[] }>;
}

/** The table of the PostgreSQL floor, created on `pool` (a primary key on `key`, nothing else). */
export async function createPostgresFloorTable(pool: FloorPgPool, table: string): Promise<void> {
  await pool.query({
    text: `CREATE TABLE IF NOT EXISTS "${table}" ("key" varchar(255) PRIMARY KEY, "fingerprint" varchar(64) NOT NULL, "status" int, "body" text, "expires_at" bigint NOT NULL)`,
  });
}

/**
 * The PostgreSQL floor, as named prepared statements (the store's are). The claim inserts,
 * or (the key taken) reads the row that is there, in one statement: the `ins` branch
 * answers for a new key, the `UNION ALL` branch for a key that was already in the
 * statement's snapshot.
 */
export function postgresFloor(pool: FloorPgPool, table: string): FloorBackend {
  const claim = `WITH ins AS (
  INSERT INTO "${table}" ("key", "fingerprint", "expires_at") VALUES ($1, $2, $3) ON CONFLICT ("key") DO NOTHING RETURNING "key"
)
SELECT true AS claimed, NULL AS "fingerprint", NULL::int AS "status", NULL AS "body" FROM ins
UNION ALL
SELECT false, "fingerprint", "status", "body" FROM "${table}" WHERE "key" = $1 AND NOT EXISTS (SELECT 1 FROM ins)`;
  const complete = `UPDATE "${table}" SET "status" = $2, "body" = $3, "expires_at" = $4 WHERE "key" = $1`;
  const claimName = `floor_claim_${table}`.slice(0, 63);
  const completeName = `floor_complete_${table}`.slice(0, 63);
  return {
    claim: async function claimOnce(key, fingerprint, ttlMs): Promise<FloorRecord | undefined> {
      const { rows } = await pool.query({ name: claimName, text: claim, values: [key, fingerprint, Date.now() + ttlMs] });
      const row = rows[0];
      // Another claimer committed the key after this statement's snapshot: ask again.
      if (row === undefined) return claimOnce(key, fingerprint, ttlMs);
      if (row.claimed === true) return undefined;
      return row.status === null
        ? { fingerprint: row.fingerprint as string }
        : { fingerprint: row.fingerprint as string, status: row.status as number, body: row.body as string };
    },
    complete: async (key, record, ttlMs) => {
      await pool.query({ name: completeName, text: complete, values: [key, record.status, record.body, Date.now() + ttlMs] });
    },
  };
}

/** A mysql2 pool (callback API), as the MariaDB floor uses it. */
export interface FloorMysqlPool {
  query(sql: string, values: unknown[], callback: (error: Error | null, result: unknown) => void): unknown;
}

function mysqlQuery(pool: FloorMysqlPool, sql: string, values: unknown[]): Promise<unknown> {
  return new Promise((resolve, reject) => pool.query(sql, values, (error, result) => (error ? reject(error) : resolve(result))));
}

/** The table of the MariaDB floor (InnoDB, primary key on `key`). */
export async function createMariadbFloorTable(pool: FloorMysqlPool, table: string): Promise<void> {
  await mysqlQuery(
    pool,
    `CREATE TABLE IF NOT EXISTS \`${table}\` (\`key\` varchar(255) NOT NULL PRIMARY KEY, \`token\` char(36) NOT NULL, \`fingerprint\` varchar(64) NOT NULL, \`status\` int NULL, \`body\` mediumtext NULL, \`expires_at\` bigint NOT NULL) ENGINE=InnoDB`,
    [],
  );
}

/**
 * The MariaDB floor: the claim inserts with a fresh token, or leaves the row as it is
 * (`ON DUPLICATE KEY UPDATE key = key`), and `RETURNING` (MariaDB 10.5+) answers the row
 * either way; the token tells which. Text protocol, as the store's statements are sent.
 */
export function mariadbFloor(pool: FloorMysqlPool, table: string): FloorBackend {
  const claim = `INSERT INTO \`${table}\` (\`key\`, \`token\`, \`fingerprint\`, \`expires_at\`) VALUES (?, ?, ?, ?)
ON DUPLICATE KEY UPDATE \`key\` = \`key\` RETURNING \`token\`, \`fingerprint\`, \`status\`, \`body\``;
  const complete = `UPDATE \`${table}\` SET \`status\` = ?, \`body\` = ?, \`expires_at\` = ? WHERE \`key\` = ?`;
  return {
    claim: async (key, fingerprint, ttlMs) => {
      const token = randomUUID();
      const rows = (await mysqlQuery(pool, claim, [key, token, fingerprint, Date.now() + ttlMs])) as Record<string, unknown>[];
      const row = rows[0];
      if (row.token === token) return undefined;
      return row.status === null
        ? { fingerprint: row.fingerprint as string }
        : { fingerprint: row.fingerprint as string, status: row.status as number, body: row.body as string };
    },
    complete: async (key, record, ttlMs) => {
      await mysqlQuery(pool, complete, [record.status, record.body, Date.now() + ttlMs, key]);
    },
  };
}
