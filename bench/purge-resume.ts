/**
 * One MariaDB purge, batch by batch, with the library's two batch statements, on a table
 * of its own with no claimers: each batch scanning the expiry index from the oldest
 * expiry (`DELETE … ORDER BY expires_at LIMIT n`, MySQL's form), and each resuming at
 * the latest expiry the last one deleted (`… AND expires_at >= ? … RETURNING expires_at`,
 * MariaDB's). Shows what InnoDB's delete-marked index entries cost a purge that starts
 * every batch from the oldest expiry: each batch scans past all the earlier ones.
 *
 *   node -r ./test/support/ts-require.js bench/purge-resume.ts [--expired 100000] [--live 100000] [--batch 1000]
 */
import { createHash } from 'node:crypto';
import { createConnection, type Connection } from 'mariadb';
import { numberArg } from './args.js';

const EXPIRED = numberArg('expired', 100_000);
const LIVE = numberArg('live', 100_000);
const BATCH = numberArg('batch', 1_000);
const TABLE = `bench_purge_resume_${process.pid}`;

async function fill(connection: Connection, now: number): Promise<void> {
  await connection.query(`DROP TABLE IF EXISTS ${TABLE}`);
  await connection.query(
    `CREATE TABLE ${TABLE} (\`key\` varchar(255) PRIMARY KEY, result mediumtext, expires_at bigint NOT NULL, KEY idx_${TABLE}_expires_at (expires_at)) ENGINE=InnoDB`,
  );
  const body = 'x'.repeat(200);
  for (let i = 0; i < EXPIRED + LIVE; i += 2_000) {
    const rows: unknown[][] = [];
    for (let j = i; j < Math.min(i + 2_000, EXPIRED + LIVE); j++) {
      // Hashed keys, as the library's: rows land in random places of the clustered index.
      const key = createHash('sha256').update(String(j)).digest('hex');
      rows.push([key, body, j < EXPIRED ? now - 3_600_000 + j : now + 3_600_000 + j]);
    }
    await connection.batch(`INSERT INTO ${TABLE} VALUES (?, ?, ?)`, rows);
  }
}

async function purge(connection: Connection, resume: boolean, now: number) {
  await connection.query('SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED');
  const times: number[] = [];
  let from = 0;
  let deleted = 0;
  const startedAt = Date.now();
  for (;;) {
    const batchStartedAt = process.hrtime.bigint();
    let affected: number;
    if (resume) {
      const rows: Array<{ expires_at: unknown }> = await connection.query(
        `DELETE FROM ${TABLE} WHERE expires_at <= ? AND expires_at >= ? ORDER BY expires_at LIMIT ? RETURNING expires_at`,
        [now, from, BATCH],
      );
      affected = rows.length;
      if (affected > 0) from = Number(rows[affected - 1].expires_at);
    } else {
      affected = (await connection.query(`DELETE FROM ${TABLE} WHERE expires_at <= ? ORDER BY expires_at LIMIT ?`, [now, BATCH])).affectedRows;
    }
    times.push(Number(process.hrtime.bigint() - batchStartedAt) / 1e6);
    deleted += affected;
    if (affected < BATCH) break;
  }
  return { deleted, ms: Date.now() - startedAt, times };
}

async function main() {
  const connection = await createConnection({ host: '127.0.0.1', port: 3306, user: 'root', database: 'test' });
  try {
    const fmt = (times: number[]) => times.map((t) => t.toFixed(1)).join(' ');
    for (const resume of [false, true]) {
      const now = Date.now();
      await fill(connection, now);
      const { deleted, ms, times } = await purge(connection, resume, now);
      const sorted = [...times].sort((a, b) => a - b);
      console.log(
        `${resume ? 'resume (MariaDB)' : 'from the oldest (MySQL)'}: ${deleted} rows in ${ms} ms, ${Math.round((deleted / ms) * 1000)} rows/s; ` +
          `${times.length} batches of ${BATCH}, ms: first ${fmt(times.slice(0, 3))} · last ${fmt(times.slice(-4, -1))} · median ${sorted[Math.floor(sorted.length / 2)].toFixed(1)}`,
      );
    }
  } finally {
    await connection.query(`DROP TABLE IF EXISTS ${TABLE}`).catch(() => undefined);
    await connection.end();
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
