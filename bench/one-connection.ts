/**
 * Latency from one keep-alive connection, one request at a time, timed in this process
 * to the microsecond (autocannon's histogram keeps whole microseconds per response but
 * the report rounds p50 to 10 µs): the p50 of each route per round, routes alternating,
 * and the median over rounds. Every request carries a new key, so the store routes are
 * first executions. For the "added p50 at one connection" beside the floor.
 *
 *   node -r ./test/support/ts-require.js bench/one-connection.ts [--platform fastify|express]
 *     [--stores memory,redis] [--routes /bare,/redis/first,/floor-redis/first] [--requests 1000] [--rounds 10]
 */
import { randomBytes } from 'node:crypto';
import http from 'node:http';
import { numberArg, stringArg } from './args.js';
import { describeLib } from './lib.js';
import { AppProcess, BODY, parseArgs, type Platform } from './run.js';
import { median, round } from './stats.js';
import type { StoreName } from './stores.js';

const platform = stringArg('platform', 'fastify') as Platform;
const stores = stringArg('stores', 'memory,redis').split(',') as StoreName[];
const routes = stringArg('routes', '/bare,/memory/first,/floor-memory/first,/redis/first,/floor-redis/first').split(',');
const requests = numberArg('requests', 1000);
const rounds = numberArg('rounds', 10);

/** One POST with a new key on the one kept-alive socket; resolves with its latency in µs. */
function post(agent: http.Agent, port: number, path: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const request = http.request(
      {
        host: '127.0.0.1',
        port,
        path,
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'idempotency-key': randomBytes(12).toString('hex') },
      },
      (response) => {
        response.resume();
        response.on('end', () => {
          if (response.statusCode! >= 300) reject(new Error(`${path} answered ${response.statusCode}`));
          else resolve(Number(process.hrtime.bigint() - started) / 1000);
        });
      },
    );
    request.on('error', reject);
    request.end(BODY);
  });
}

async function main(): Promise<void> {
  // The servers `npm run bench` uses (REDIS_URL, DATABASE_URL, MYSQL_URL or its defaults).
  const { redisUrl, postgresUrl, mariadbUrl } = parseArgs([]);
  const app = await AppProcess.start({
    platform,
    stores,
    slowMs: 100,
    runId: randomBytes(4).toString('hex'),
    autoPipelining: false,
    redisUrl,
    postgresUrl,
    mariadbUrl,
  });
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const p50s = new Map<string, number[]>(routes.map((route) => [route, []]));
  try {
    // Warm-up: JIT and connections, not measured.
    for (const route of routes) for (let i = 0; i < 300; i++) await post(agent, app.port, route);
    for (let r = 0; r < rounds; r++) {
      for (const route of routes) {
        const latencies: number[] = [];
        for (let i = 0; i < requests; i++) latencies.push(await post(agent, app.port, route));
        p50s.get(route)!.push(median(latencies));
      }
    }
  } finally {
    agent.destroy();
    await app.close();
  }
  const bare = p50s.has('/bare') ? median(p50s.get('/bare')!) : undefined;
  console.log(
    `${platform}, ${describeLib()}: p50 µs from one connection, ${requests} requests per route and round, median of ${rounds} rounds`,
  );
  for (const [route, values] of p50s) {
    const p50 = median(values);
    const added = bare === undefined || route === '/bare' ? '' : `  added ${round(p50 - bare, 1)}`;
    console.log(
      `  ${route.padEnd(22)} ${String(round(p50, 1)).padStart(7)}${added}  (rounds: ${values.map((v) => round(v, 0)).join(' ')})`,
    );
  }
}

main().then(
  () => process.exit(0),
  (error: unknown) => {
    console.error(error);
    process.exit(1);
  },
);
