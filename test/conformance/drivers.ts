/**
 * Every entry point that has a conformance driver, and what in the library it serves.
 * `registry.spec.ts` reads the entry points from the library's code (the adapters of
 * IdempotencyRuntime, the method kinds of method-target.ts, every function that runs the
 * idempotency protocol) and fails when one is served by no driver here; each driver's
 * suite is `test/conformance/<entry>.conformance.spec.ts`.
 *
 * `serves`:
 * - `adapter:<key>`: a transport adapter of `IdempotencyRuntime` (its `adapters` record);
 * - `method:<kind>`: a `MethodKind` of lib/nest/method-target.ts (provider methods, jobs, schedules);
 * - `caller:<name>`: a function outside the runtime that runs the protocol itself (`makeIdempotent`).
 *
 * `path` (request adapters): through which entry of the runtime the driver's requests go.
 */
export const CONFORMANCE_DRIVERS = {
  express: { serves: 'adapter:http', path: 'wrapper', what: 'HTTP routes on @nestjs/platform-express' },
  fastify: { serves: 'adapter:http', path: 'wrapper', what: 'HTTP routes on @nestjs/platform-fastify' },
  'express-interceptor': { serves: 'adapter:http', path: 'interceptor', what: 'the same, IdempotencyInterceptor registered globally' },
  'fastify-interceptor': { serves: 'adapter:http', path: 'interceptor', what: 'the same, IdempotencyInterceptor registered globally' },
  'express-redis': {
    serves: 'adapter:http',
    path: 'wrapper',
    what: 'HTTP on Express, the records in Redis (read back for the secrets check)',
  },
  tcp: { serves: 'adapter:rpc', path: 'wrapper', what: '@MessagePattern handlers on Transport.TCP (key option over the payload)' },
  nats: {
    serves: 'adapter:rpc',
    path: 'wrapper',
    what: '@MessagePattern handlers on Transport.NATS (key from the Idempotency-Key header)',
  },
  rmq: { serves: 'adapter:rpc', path: 'wrapper', what: '@MessagePattern handlers on Transport.RMQ (messageId, ack: true, noAck: false)' },
  'tcp-interceptor': { serves: 'adapter:rpc', path: 'interceptor', what: 'the same, IdempotencyInterceptor registered globally' },
  'nats-interceptor': { serves: 'adapter:rpc', path: 'interceptor', what: 'the same, IdempotencyInterceptor registered globally' },
  graphql: { serves: 'adapter:graphql', path: 'wrapper', what: 'GraphQL mutations (Apollo, code first)' },
  'graphql-interceptor': { serves: 'adapter:graphql', path: 'interceptor', what: 'the same, IdempotencyInterceptor registered globally' },
  'socket.io': { serves: 'adapter:ws', path: 'wrapper', what: '@SubscribeMessage handlers on @nestjs/platform-socket.io (the ack)' },
  ws: { serves: 'adapter:ws', path: 'wrapper', what: '@SubscribeMessage handlers on @nestjs/platform-ws (the reply message)' },
  'socket.io-interceptor': { serves: 'adapter:ws', path: 'interceptor', what: 'the same, IdempotencyInterceptor registered globally' },
  'service-method': { serves: 'method:method', what: '@Idempotent({ key }) on a provider method your code calls' },
  event: { serves: 'method:method', what: '@Idempotent({ key }) on an @OnEvent() listener (emitAsync)' },
  bullmq: { serves: 'method:bullmq', what: 'process(job) of an @nestjs/bullmq WorkerHost' },
  cron: { serves: 'method:cron', what: 'an @nestjs/schedule @Cron() job' },
  interval: { serves: 'method:interval', what: 'an @nestjs/schedule @Interval() job' },
  'make-idempotent': { serves: 'caller:makeIdempotent', what: 'makeIdempotent(fn, { store, key })' },
  'service-run': { serves: 'caller:IdempotencyService.run', what: 'IdempotencyService.run(key, fn, { scope, fingerprint })' },
  'run-idempotent-transaction': {
    serves: 'caller:executeIdempotentTransaction',
    what: 'runIdempotentTransaction(dataSource, { key, scope, fingerprint }, work) of nestjs-idempotency/typeorm',
  },
} as const satisfies Record<string, { serves: string; what: string; path?: RuntimePath }>;

/**
 * The two ways a request reaches the runtime's protocol: `@Idempotent()`'s method wrapper
 * (the default) and `IdempotencyInterceptor` (registered by the application). Every
 * transport adapter is run through both.
 */
export type RuntimePath = 'wrapper' | 'interceptor';

export type EntryId = keyof typeof CONFORMANCE_DRIVERS;

/** `name` as a registered entry id (drivers that serve several entries compute their name). */
export function entryId(name: string): EntryId {
  if (!(name in CONFORMANCE_DRIVERS)) throw new Error(`${name} is not registered in test/conformance/drivers.ts`);
  return name as EntryId;
}

/**
 * Entry points one adapter or kind serves in several ways, each of which needs its own
 * driver: the issue names Express and Fastify, TCP and a broker, provider methods and
 * `@OnEvent()` listeners (both `method` kind, told apart by `MethodTarget.events`).
 */
export const REQUIRED_DRIVERS: Record<string, ReadonlyArray<readonly EntryId[]>> = {
  'adapter:http': [['express'], ['fastify']],
  'adapter:rpc': [['tcp'], ['nats']],
  'adapter:ws': [['socket.io'], ['ws']],
  'method:method': [['service-method'], ['event']],
};

/**
 * Functions that run the protocol (the engine's `execute` / `admit`, a store's
 * `runTransactional`) and what they serve: the runtime serves every adapter and method
 * kind (counted above); the others are entry points of their own.
 */
export const PROTOCOL_CALLERS: Record<string, string> = {
  'IdempotencyRuntime.execute': 'runtime',
  'IdempotencyRuntime.runTransactional': 'runtime',
  makeIdempotent: 'caller:makeIdempotent',
  'IdempotencyService.run': 'caller:IdempotencyService.run',
  executeIdempotentTransaction: 'caller:executeIdempotentTransaction',
};
