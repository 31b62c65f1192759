/**
 * Loads NestJS 11 from the peers install (`bench/.scratch/peers`, from the committed
 * lockfile of `.ci/legs/peers`) for everything in this process: the app, this library
 * and @node-idempotency/nestjs, whose peer range stops at Nest 10. Imported first by
 * bench/peers/app.ts, before anything requires `@nestjs/*`. rxjs, reflect-metadata,
 * ioredis resolve from the main node_modules, as in the NestJS 11 test leg.
 */
import Module from 'node:module';
import { join, resolve } from 'node:path';

export const PEERS_DIR = process.env.BENCH_PEERS_DIR ? resolve(process.env.BENCH_PEERS_DIR) : join(__dirname, '..', '.scratch', 'peers');

const NEST = /^@nestjs\/(common|core|platform-express|platform-fastify)(\/|$)/;

type Resolve = (request: string, parent: unknown, isMain: boolean, options?: { paths?: string[] }) => string;
const loader = Module as unknown as { _resolveFilename: Resolve };
const original = loader._resolveFilename;
loader._resolveFilename = function resolveNest11(this: unknown, request, parent, isMain, options) {
  if (NEST.test(request)) return original.call(this, request, parent, isMain, { paths: [PEERS_DIR] });
  return original.call(this, request, parent, isMain, options);
};
