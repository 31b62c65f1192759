// Starts the sample payments service. With no environment it needs no service at all:
//   node -r ./test/support/ts-require.js sample-app/src/main.ts
// REDIS_URL, DATABASE_URL (and AMQP_URL) switch it to the real stores; see config.ts.
import { configFromEnv, describeBackends } from './config.js';
import { createSampleApp } from './app.js';

async function main(): Promise<void> {
  const config = configFromEnv();
  const app = await createSampleApp(config);
  app.enableShutdownHooks();
  if (config.amqpUrl) await app.startAllMicroservices();
  await app.listen(config.port, '127.0.0.1');
  const address = app.getHttpServer().address() as { port: number };
  // The demo waits for this exact line to learn the port.
  console.log(`sample-app listening on http://127.0.0.1:${address.port} (pid ${process.pid}; ${describeBackends(config)})`);
}

main().catch((error: unknown) => {
  console.error('sample-app failed to start:', error);
  process.exit(1);
});
