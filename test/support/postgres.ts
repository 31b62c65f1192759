/** The test PostgreSQL (trust auth); PG* variables override it. */
export const pgConnection = {
  type: 'postgres' as const,
  host: process.env.PGHOST ?? '127.0.0.1',
  port: Number(process.env.PGPORT ?? 5432),
  username: process.env.PGUSER ?? 'postgres',
  password: process.env.PGPASSWORD,
  database: process.env.PGDATABASE ?? 'test',
};
