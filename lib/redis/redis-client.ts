import { createHash } from 'node:crypto';
import { IdempotencyConfigurationError, IdempotencyStoreUnavailableError } from '../core/errors.js';
import { checkWholeNumber } from '../core/options.js';
import { TimerQueue, type TimerQueueItem } from '../core/timer-queue.js';
import { watchdogFor, type ConnectionWatchdog } from './connection-watchdog.js';
import { adaptNodeRedis, NodeRedisAdapter, type NodeRedisClientLike } from './node-redis-client.js';

type RedisArgument = string | number;

/**
 * The part of an ioredis client the Redis classes of this package use. Both ioredis 5
 * and 6, standalone `Redis` and `Cluster`, match it structurally, so ioredis stays an
 * optional peer dependency that this package never imports at runtime. The classes also
 * take a node-redis client (`NodeRedisClientLike`).
 */
export interface RedisClientLike {
  eval(script: string, numkeys: number, ...args: RedisArgument[]): Promise<unknown>;
  evalsha(sha1: string, numkeys: number, ...args: RedisArgument[]): Promise<unknown>;
  ping(): Promise<unknown>;
  /**
   * ioredis: the connection's state (`'wait'` for a `lazyConnect` client not yet
   * connected, `'connecting'`, `'connect'`, `'ready'`, `'reconnecting'`, `'close'`,
   * `'end'`), on `Redis` and on `Cluster`. A client without it is pinged at boot instead.
   */
  readonly status?: string;
  /** ioredis: opens a `lazyConnect` client's connection. */
  connect?(): Promise<unknown>;
  /** ioredis: its events (`ready`, `error`, `end`), for the boot wait. */
  on?(event: string, listener: (...args: unknown[]) => void): unknown;
  removeListener?(event: string, listener: (...args: unknown[]) => void): unknown;
}

/** Options shared by every Redis-backed class of this package. */
export interface RedisCallOptions {
  /**
   * Longest time one operation may take before it rejects with
   * `RedisOperationTimeoutError`, ms; 0 leaves the bound to the client's own
   * `commandTimeout`. This guard holds whatever the client settings are, so a request
   * never hangs on an unreachable Redis.
   * @default 2000
   */
  timeout?: number;
}

/** Longest wait for one Redis command before it counts as a store error, ms. */
export const DEFAULT_REDIS_TIMEOUT = 2_000;

/** Longest wait at boot for a client that is still connecting, ms. */
export const DEFAULT_REDIS_READY_TIMEOUT = 10_000;

/**
 * Redis did not answer in time. A store-unavailable error (HTTP 503): the engine passes
 * it on as it is, and `onStoreError: 'fail-open'` applies to it like to any outage.
 */
export class RedisOperationTimeoutError extends IdempotencyStoreUnavailableError {
  constructor(operation: string, timeout: number) {
    const message = `Redis did not answer ${operation} within ${timeout} ms`;
    super(new Error(message));
    this.message = message;
    Object.defineProperty(this, 'hint', {
      value:
        'Check that Redis is reachable. Create the client with recommendedRedisOptions() (ioredis) or recommendedNodeRedisOptions() (node-redis) so that an outage fails fast (see docs/redis.md).',
      enumerable: true,
    });
  }
}

/** A Lua script with its SHA-1, run with EVALSHA so that only the digest travels. */
export class LuaScript {
  readonly sha: string;
  constructor(
    readonly name: string,
    readonly source: string,
  ) {
    this.sha = createHash('sha1').update(source).digest('hex');
  }
}

/** One call of a `RedisScriptRunner` still waiting for its reply, until its deadline. */
interface PendingCall extends TimerQueueItem {
  /** The script's name (or `ping`), for the timeout's message. */
  readonly operation: string;
  /** Set when the call was rejected for its deadline: no fallback may be sent after that. */
  timedOut: boolean;
  readonly reject: (error: unknown) => void;
}

/**
 * Runs the scripts of one Redis-backed object: exactly one round trip per call in the
 * steady state. The first call of each script sends EVAL (which also caches the script
 * on that server), later calls EVALSHA; a NOSCRIPT reply (server restarted or flushed,
 * another Cluster node) falls back to EVAL once.
 */
export class RedisScriptRunner {
  private readonly sent = new Set<LuaScript>();
  readonly timeout: number;
  /**
   * The deadlines of the calls in flight, on one timer (every call of a runner has the
   * same timeout); undefined when `timeout` is 0.
   */
  private readonly deadlines: TimerQueue<PendingCall> | undefined;

  /** The client as this package calls it: ioredis as it is, node-redis through `NodeRedisAdapter`. */
  readonly client: RedisClientLike;

  /**
   * Drops the client's connection when a call timed out on a connection that answered
   * nothing since (connection-watchdog.ts); undefined when `timeout` is 0.
   */
  readonly watchdog: ConnectionWatchdog | undefined;

  constructor(
    client: RedisClientLike | NodeRedisClientLike,
    options: RedisCallOptions,
    private readonly owner: string,
  ) {
    const adapted = adaptNodeRedis(client);
    if (!adapted || typeof adapted.evalsha !== 'function' || typeof adapted.eval !== 'function') {
      throw new IdempotencyConfigurationError(
        `${owner}: the first argument must be an ioredis or node-redis client.`,
        'Pass an ioredis 5 or 6 client (new Redis(...), new Cluster(...)) or a node-redis 5 or 6 client (createClient(...), createCluster(...)).',
      );
    }
    this.client = adapted;
    checkWholeNumber(owner, 'timeout', options.timeout, { unit: 'ms', min: 0, example: '2_000' });
    this.timeout = options.timeout ?? DEFAULT_REDIS_TIMEOUT;
    this.deadlines = this.timeout === 0 ? undefined : new TimerQueue<PendingCall>(this.timeout, (call) => this.expire(call));
    const raw = adapted instanceof NodeRedisAdapter ? adapted.client : adapted;
    this.watchdog =
      this.timeout === 0 ? undefined : watchdogFor(raw, adapted instanceof NodeRedisAdapter ? 'node-redis' : 'ioredis', this.timeout);
  }

  /**
   * Runs `script` right after `CLIENT CACHING yes`, both written at once on the client's
   * one connection, so that Redis tracks the keys the script reads for that connection
   * (the near cache's `OPTIN` tracking, near-cache-client-tracking.ts). Sent as EVAL: an
   * EVALSHA refused with NOSCRIPT would be sent again without the CACHING before it.
   * `tracked` is false when Redis refused the CACHING (tracking is off on the connection):
   * the script ran, untracked. ioredis only (`call`).
   */
  runTracked(script: LuaScript, key: string, args: readonly RedisArgument[]): Promise<{ reply: unknown; tracked: boolean }> {
    const client = this.client as RedisClientLike & { call(command: string, ...args: RedisArgument[]): Promise<unknown> };
    let work: Promise<{ reply: unknown; tracked: boolean }>;
    try {
      const caching = client.call('CLIENT', 'CACHING', 'yes').then(
        () => true,
        () => false,
      );
      const reply = this.client.eval(script.source, 1, key, ...args);
      work = Promise.all([reply, caching]).then(([value, tracked]) => ({ reply: value, tracked }));
    } catch (error) {
      work = Promise.reject(error);
    }
    return this.watch(script.name, work);
  }

  /** Runs `script` on `key` (every script of this package touches exactly one key). */
  run(script: LuaScript, key: string, args: readonly RedisArgument[]): Promise<unknown> {
    const deadlines = this.deadlines;
    if (!deadlines) return this.send(script, key, args, undefined);
    this.watchdog?.check();
    return new Promise((resolve, reject) => {
      const call: PendingCall = { dueAt: 0, operation: script.name, timedOut: false, reject };
      this.watchCall(deadlines, call, this.send(script, key, args, call), resolve, reject);
    });
  }

  /**
   * Runs `script` on several keys (the outbox's completion: the record and the outbox's
   * keys), all declared so that the client's `keyPrefix` applies to each. One Redis node
   * only: a Cluster refuses keys of different slots.
   */
  runOnKeys(script: LuaScript, keys: readonly [string, ...string[]], args: readonly RedisArgument[]): Promise<unknown> {
    const rest = [...keys.slice(1), ...args];
    const deadlines = this.deadlines;
    if (!deadlines) return this.send(script, keys[0], rest, undefined, keys.length);
    this.watchdog?.check();
    return new Promise((resolve, reject) => {
      const call: PendingCall = { dueAt: 0, operation: script.name, timedOut: false, reject };
      this.watchCall(deadlines, call, this.send(script, keys[0], rest, call, keys.length), resolve, reject);
    });
  }

  ping(): Promise<void> {
    let pong: Promise<void>;
    try {
      pong = this.client.ping().then(() => undefined);
    } catch (error) {
      pong = Promise.reject(error);
    }
    return this.watch('ping', pong);
  }

  /** `work` under the call deadline, when there is one. */
  private watch<T>(operation: string, work: Promise<T>): Promise<T> {
    const deadlines = this.deadlines;
    if (!deadlines) return work;
    this.watchdog?.check();
    return new Promise<T>((resolve, reject) => {
      const call: PendingCall = { dueAt: 0, operation, timedOut: false, reject };
      this.watchCall(deadlines, call, work, resolve as (value: unknown) => void, reject);
    });
  }

  /** The deadline of one call, and what its outcome tells the watchdog. */
  private watchCall(
    deadlines: TimerQueue<PendingCall>,
    call: PendingCall,
    work: Promise<unknown>,
    resolve: (value: unknown) => void,
    reject: (error: unknown) => void,
  ): void {
    const watchdog = this.watchdog!;
    deadlines.watch(
      call,
      work,
      (value) => {
        watchdog.answered();
        resolve(value);
      },
      (error) => {
        // The client's own reply timeout (ioredis commandTimeout) says the same as ours.
        if (isClientTimeout(error)) watchdog.timedOut(call.dueAt - this.timeout);
        reject(error);
      },
    );
  }

  private expire(call: PendingCall): void {
    call.timedOut = true;
    call.reject(new RedisOperationTimeoutError(`${this.owner}.${call.operation}`, this.timeout));
    this.watchdog?.timedOut(call.dueAt - this.timeout);
  }

  /** `numkeys`: `key` and the first `numkeys - 1` of `args` are the script's keys. */
  private send(
    script: LuaScript,
    key: string,
    args: readonly RedisArgument[],
    call: PendingCall | undefined,
    numkeys = 1,
  ): Promise<unknown> {
    try {
      return this.sendScript(script, key, args, call, numkeys);
    } catch (error) {
      // A client that throws instead of rejecting (a closed one, a test double) still fails the call.
      return Promise.reject(error);
    }
  }

  private sendScript(
    script: LuaScript,
    key: string,
    args: readonly RedisArgument[],
    call: PendingCall | undefined,
    numkeys: number,
  ): Promise<unknown> {
    if (!this.sent.has(script)) {
      // Marked before the reply: commands on one connection run in order, so calls
      // issued meanwhile find the script cached (or fall back on NOSCRIPT elsewhere).
      this.sent.add(script);
      return this.client.eval(script.source, numkeys, key, ...args).catch((error: unknown) => {
        this.sent.delete(script);
        throw error;
      });
    }
    // No async function here: this runs on every request, and the steady state is one
    // EVALSHA whose promise is returned as it is.
    return this.client.evalsha(script.sha, numkeys, key, ...args).catch((error: unknown) => {
      if (!isNoScript(error)) throw error;
      // Once the caller was told this call failed, it may have sent a command that undoes
      // it (a release after a failed claim); sent now, the fallback would run after that
      // undo and take effect for nobody.
      if (call?.timedOut) throw error;
      return this.client.eval(script.source, numkeys, key, ...args);
    });
  }
}

/** ioredis's `commandTimeout` rejection. */
function isClientTimeout(error: unknown): boolean {
  return error instanceof Error && error.message === 'Command timed out';
}

function isNoScript(error: unknown): boolean {
  return error instanceof Error && error.message.includes('NOSCRIPT');
}

/**
 * A Lua nil or false comes back as `null` over RESP2 and as `null` or `false` over
 * RESP3 (ioredis 6 speaks RESP3 by default); both mean "absent".
 */
export function isAbsent(value: unknown): value is null | undefined | false {
  return value === null || value === undefined || value === false;
}

export function asString(value: unknown): string | undefined {
  if (isAbsent(value)) return undefined;
  return Buffer.isBuffer(value) ? value.toString('utf8') : String(value);
}

/**
 * A duration argument for PX/PEXPIRE, which take whole milliseconds: every duration
 * of this package already is one (checkWholeNumber), so nothing is rounded here.
 */
export function wholeMs(value: number, name: string, owner: string): number {
  if (value === undefined) throw new IdempotencyConfigurationError(`${owner}: ${name} is required.`, `Pass ${name} in milliseconds.`);
  checkWholeNumber(owner, name, value, { unit: 'ms' });
  return value;
}

/** Lua: the server clock in epoch ms, so every expiry comes from one clock. */
export const LUA_NOW_MS = `local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function ms_string(n)
  return string.format('%.0f', n)
end
`;
