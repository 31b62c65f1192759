import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { PrismaMariaDb } from '@prisma/adapter-mariadb';
import { PrismaPg } from '@prisma/adapter-pg';
import type { PrismaClientLike } from '../../lib/prisma/index.js';

/**
 * Generated Prisma clients for the tests, one per provider, with the models the specs use
 * (an account with a balance and a version, an order with a status). Generated once per
 * schema text into .tmp/ (ignored by git), offline: `prisma generate` does not use the
 * schema engine, the CLI only insists on one (PRISMA_SCHEMA_ENGINE_BINARY).
 */
const ROOT = resolve(__dirname, '../..');

const MODELS = `
model Account {
  id      String @id
  balance Int
  version Int    @default(0)
  @@map("accounts")
}

model Order {
  id      String @id
  status  String
  version Int    @default(0)
  @@map("orders")
}
`;

/** The tables of MODELS in SQL (the tests create them without prisma migrate). */
export const BUSINESS_TABLES = {
  postgresql: [
    'CREATE TABLE IF NOT EXISTS accounts (id varchar(64) PRIMARY KEY, balance integer NOT NULL, version integer NOT NULL DEFAULT 0)',
    'CREATE TABLE IF NOT EXISTS orders (id varchar(64) PRIMARY KEY, status varchar(32) NOT NULL, version integer NOT NULL DEFAULT 0)',
  ],
  mysql: [
    'CREATE TABLE IF NOT EXISTS accounts (id varchar(64) PRIMARY KEY, balance int NOT NULL, version int NOT NULL DEFAULT 0)',
    'CREATE TABLE IF NOT EXISTS orders (id varchar(64) PRIMARY KEY, status varchar(32) NOT NULL, version int NOT NULL DEFAULT 0)',
  ],
} as const;

export type Provider = 'postgresql' | 'mysql';

/** The folder of the generated client of `provider` (generating it when missing). */
export function generatedClientDir(provider: Provider): string {
  const schema = `generator client {
  provider            = "prisma-client"
  output              = "./client"
  moduleFormat        = "cjs"
  importFileExtension = "js"
}

datasource db {
  provider = "${provider}"
}
${MODELS}`;
  const hash = createHash('sha256').update(schema).digest('hex').slice(0, 12);
  const dir = join(ROOT, '.tmp', 'prisma-test-clients', `${provider}-${hash}`);
  if (existsSync(join(dir, 'client', 'client.ts'))) return join(dir, 'client');
  // Generated beside, then renamed: two test files generating at once never see half a client.
  const scratch = `${dir}.${process.pid}.${randomBytes(3).toString('hex')}`;
  mkdirSync(scratch, { recursive: true });
  writeFileSync(join(scratch, 'schema.prisma'), schema);
  execFileSync(
    process.execPath,
    [join(ROOT, 'node_modules/prisma/build/index.js'), 'generate', '--schema', join(scratch, 'schema.prisma')],
    {
      cwd: scratch,
      env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: '/bin/true', PRISMA_HIDE_UPDATE_MESSAGE: '1', CHECKPOINT_DISABLE: '1' },
      stdio: 'pipe',
    },
  );
  try {
    renameSync(scratch, dir);
  } catch {
    rmSync(scratch, { recursive: true, force: true }); // another file won the race
  }
  return join(dir, 'client');
}

/** A generated client: raw SQL, transactions and the two models (their delegates untyped here). */
export interface TestPrismaClient extends PrismaClientLike {
  account: any;
  order: any;
  $disconnect(): Promise<void>;
}

export function uniqueName(prefix: string): string {
  return `${prefix}_${process.pid}_${randomBytes(4).toString('hex')}`;
}

function clientClass(provider: Provider): new (options: { adapter: unknown }) => TestPrismaClient {
  return require(join(generatedClientDir(provider), 'client.ts')).PrismaClient;
}

export interface TestDatabase {
  readonly provider: Provider;
  readonly prisma: TestPrismaClient;
  /** A second client on the same database (another "instance"). */
  newClient(poolSize?: number): TestPrismaClient;
  destroy(): Promise<void>;
}

export const pgUrl = process.env.DATABASE_URL ?? 'postgresql://postgres@127.0.0.1:5432/test';
export const mariadbConfig = {
  host: process.env.MYSQL_HOST ?? '127.0.0.1',
  port: Number(process.env.MYSQL_PORT ?? 3306),
  user: process.env.MYSQL_USER ?? 'root',
  password: process.env.MYSQL_PASSWORD ?? '',
};

/** A client on a private PostgreSQL schema (search_path), with the business tables; `destroy` drops it. */
export async function createPgDatabase(poolSize = 10): Promise<TestDatabase> {
  const PrismaClient = clientClass('postgresql');
  const schema = uniqueName('prisma');
  const clients: TestPrismaClient[] = [];
  const newClient = (max = poolSize) => {
    const client = new PrismaClient({
      adapter: new PrismaPg({ connectionString: pgUrl, max, options: `-c search_path=${schema}` }, { schema }),
    });
    clients.push(client);
    return client;
  };
  const prisma = newClient();
  await prisma.$executeRawUnsafe(`CREATE SCHEMA IF NOT EXISTS "${schema}"`);
  for (const ddl of BUSINESS_TABLES.postgresql) await prisma.$executeRawUnsafe(ddl);
  return {
    provider: 'postgresql',
    prisma,
    newClient,
    async destroy() {
      await prisma.$executeRawUnsafe(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
      for (const client of clients) await client.$disconnect();
    },
  };
}

/** A client on a fresh MariaDB database of its own, with the business tables; `destroy` drops it. */
export async function createMariaDatabase(poolSize = 10): Promise<TestDatabase> {
  const PrismaClient = clientClass('mysql');
  const database = uniqueName('prisma');
  const admin = new PrismaClient({ adapter: new PrismaMariaDb({ ...mariadbConfig, database: 'test', connectionLimit: 1 }) });
  await admin.$executeRawUnsafe(`CREATE DATABASE IF NOT EXISTS \`${database}\``);
  await admin.$disconnect();
  const clients: TestPrismaClient[] = [];
  const newClient = (connectionLimit = poolSize) => {
    const client = new PrismaClient({ adapter: new PrismaMariaDb({ ...mariadbConfig, database, connectionLimit }) });
    clients.push(client);
    return client;
  };
  const prisma = newClient();
  for (const ddl of BUSINESS_TABLES.mysql) await prisma.$executeRawUnsafe(ddl);
  return {
    provider: 'mysql',
    prisma,
    newClient,
    async destroy() {
      await prisma.$executeRawUnsafe(`DROP DATABASE IF EXISTS \`${database}\``);
      for (const client of clients) await client.$disconnect();
    },
  };
}

/** Both servers, for describe.each. */
export const DATABASES: Array<[string, () => Promise<TestDatabase>]> = [
  ['PostgreSQL', () => createPgDatabase()],
  ['MariaDB', () => createMariaDatabase()],
];
