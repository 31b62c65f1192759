import { IdempotencyConfigurationError } from '../core/errors.js';
import { checkWholeNumber } from '../core/options.js';
import type { ClaimedOutbox, OutboxBacklog, OutboxClaimRequest, OutboxSettlement, StagedOutbox } from '../core/outbox-store.js';
import { LUA_NOW_MS, LuaScript, asString, isAbsent, wholeMs, type RedisScriptRunner } from './redis-client.js';
import { LUA_COMPLETE_RECORD } from './redis-record-scripts.js';

/*
 * The outbox of the Redis store (docs/outbox.md), beside the records under the store's
 * prefix, `<prefix>outbox` (the "base"; never a key itself, and never a record key, which
 * always has a `{` after the prefix):
 *   <base>:e:<outbox id>  a hash per execution that staged messages:
 *                         m  its messages, a JSON array in staging order
 *                         c  how many; n  how many were sent (confirmed)
 *                         a  failed attempts; s  staged at; t  sent at (once all are)
 *                         o  the relay whose claim holds it; u  until when
 *                         k  the record's key; err  the last send error
 *   <base>:due      sorted set of the executions not all sent; score: when a relay may
 *                   claim it next (staging time, a back-off's end, or a claim's end)
 *   <base>:pending  the same executions, scored by staging time: the backlog's count and
 *                   oldest age in one read
 *   <base>:sent     the executions all sent, scored by when: purged after the retention
 * Every time is the Redis server's clock, epoch ms. Scripts declare the base (and the
 * record) and derive the other keys from it, as the steps do from the record key, so a
 * client's `keyPrefix` applies to all of them. The completion stages in the script that
 * completes the record, so the record and the outbox keys must be in one hash slot. On a
 * Cluster they are only when the prefix carries a hash tag of its own
 * (`{orders}:idem:`): Redis hashes a key by its first tag, so every record and outbox key
 * of the store is in that one slot (on one master). Without it, each record is in the
 * slot of its own `{key}`, and an index the relays could read in one place would be in
 * another: that Cluster store has no outbox.
 */

// The record's completion (the same compare-and-set as COMPLETE) and, only when this
// call completed it, the staging: a repeat under the completing token stages nothing
// again, and a lease that is not the token's stages nothing at all.
const COMPLETE_AND_STAGE = new LuaScript(
  'complete-and-stage',
  `${LUA_NOW_MS}${LUA_COMPLETE_RECORD}
local done = complete_record(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
if done == 2 then
  local entry = KEYS[2] .. ':e:' .. ARGV[4]
  if redis.call('EXISTS', entry) == 0 then
    local now = ms_string(now_ms())
    redis.call('HSET', entry, 'm', ARGV[5], 'c', ARGV[6], 'n', '0', 'a', '0', 's', now, 'k', ARGV[7])
    redis.call('ZADD', KEYS[2] .. ':due', now, ARGV[4])
    redis.call('ZADD', KEYS[2] .. ':pending', now, ARGV[4])
  end
end
if done == 0 then return 0 end
return 1
`,
);

// Due executions, earliest first; the claim moves each one's due score to the claim's
// end, so no other relay sees it until then (a relay that died is taken over after it).
const CLAIM_OUTBOX = new LuaScript(
  'claim-outbox',
  `${LUA_NOW_MS}
local now = now_ms()
local due = KEYS[1] .. ':due'
local ids = redis.call('ZRANGEBYSCORE', due, '-inf', ms_string(now), 'LIMIT', 0, tonumber(ARGV[2]))
local claimed_until = ms_string(now + tonumber(ARGV[3]))
local claimed = {}
for _, id in ipairs(ids) do
  local entry = KEYS[1] .. ':e:' .. id
  local fields = redis.call('HMGET', entry, 'm', 'n', 'a', 's')
  if fields[1] then
    redis.call('HSET', entry, 'o', ARGV[1], 'u', claimed_until)
    redis.call('ZADD', due, claimed_until, id)
    claimed[#claimed + 1] = {id, fields[1], fields[2], fields[3], fields[4]}
  else
    -- Its hash was deleted outside the store: nothing is left to send.
    redis.call('ZREM', due, id)
    redis.call('ZREM', KEYS[1] .. ':pending', id)
  end
end
return claimed
`,
);

// Compare-and-set on the claim's owner: a relay whose claim another one took over after
// it ran out changes nothing.
const SETTLE_OUTBOX = new LuaScript(
  'settle-outbox',
  `${LUA_NOW_MS}
local now = now_ms()
local id = ARGV[1]
local entry = KEYS[1] .. ':e:' .. id
local fields = redis.call('HMGET', entry, 'o', 'n', 'c', 'a')
if fields[1] ~= ARGV[2] then return 0 end
local sent = math.max(tonumber(fields[2]), tonumber(ARGV[3]))
redis.call('HDEL', entry, 'o', 'u')
if sent >= tonumber(fields[3]) then
  redis.call('HSET', entry, 'n', ms_string(sent), 't', ms_string(now))
  redis.call('HDEL', entry, 'err')
  redis.call('ZREM', KEYS[1] .. ':due', id)
  redis.call('ZREM', KEYS[1] .. ':pending', id)
  redis.call('ZADD', KEYS[1] .. ':sent', ms_string(now), id)
  return 1
end
redis.call('HSET', entry, 'n', ms_string(sent), 'a', ms_string(tonumber(fields[4]) + 1))
if ARGV[5] == '1' then redis.call('HSET', entry, 'err', ARGV[6]) else redis.call('HDEL', entry, 'err') end
redis.call('ZADD', KEYS[1] .. ':due', ms_string(now + tonumber(ARGV[4])), id)
return 1
`,
);

const OUTBOX_BACKLOG = new LuaScript(
  'outbox-backlog',
  `local pending = KEYS[1] .. ':pending'
return {redis.call('ZCARD', pending), redis.call('ZRANGE', pending, 0, 0, 'WITHSCORES')[2]}
`,
);

const PURGE_OUTBOX = new LuaScript(
  'purge-outbox',
  `${LUA_NOW_MS}
local sent = KEYS[1] .. ':sent'
local ids = redis.call('ZRANGEBYSCORE', sent, '-inf', ms_string(now_ms() - tonumber(ARGV[1])), 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(ids) do
  redis.call('DEL', KEYS[1] .. ':e:' .. id)
  redis.call('ZREM', sent, id)
end
return #ids
`,
);

/** The longest send error kept with an execution, characters (as the SQL outbox keeps). */
const MAX_ERROR_LENGTH = 2_000;

const OWNER = 'RedisIdempotencyStore';

/** Why a store has no outbox, and what to do instead: `emit()` and the outbox's methods say it. */
export interface RedisOutboxUnavailable {
  readonly reason: string;
  readonly hint: string;
}

const ON_CLUSTER: RedisOutboxUnavailable = {
  reason:
    'the outbox is not available with a Redis Cluster client and a prefix without a hash tag: a record and the outbox keys are in different hash slots, so no script can complete the one and stage the messages in the other atomically',
  hint: "Give the handlers that emit a store whose outbox commits with their record (@Idempotent({ store }), makeIdempotent({ store })): a RedisIdempotencyStore on this Cluster whose prefix has a hash tag, e.g. prefix: '{orders-outbox}:idem:' (its records and messages then share one slot, on one master), a RedisIdempotencyStore on a standalone (or Sentinel) Redis, or a TypeORM, Prisma or Drizzle store.",
};

const TURNED_OFF: RedisOutboxUnavailable = {
  reason: 'its outbox option is false',
  hint: 'Remove outbox: false from the RedisIdempotencyStore options to stage messages in this Redis.',
};

/**
 * The `outbox` option against the client: the outbox, or why there is none. `true` with a
 * Cluster client and an untagged prefix is refused here, when the store is created (as
 * `nearCache` is).
 */
export function resolveRedisOutbox(
  option: boolean | undefined,
  scripts: RedisScriptRunner,
  prefix: string,
): RedisOutbox | RedisOutboxUnavailable {
  if (option !== undefined && typeof option !== 'boolean') {
    throw new IdempotencyConfigurationError(
      `${OWNER}: outbox must be true or false, got ${String(option)}.`,
      'Write outbox: true or outbox: false.',
    );
  }
  const cluster = (scripts.client as { isCluster?: unknown }).isCluster === true && !hasHashTag(prefix);
  if (cluster && option === true) throw new IdempotencyConfigurationError(`${OWNER}: ${ON_CLUSTER.reason}.`, ON_CLUSTER.hint);
  if (cluster) return ON_CLUSTER;
  if (option === false) return TURNED_OFF;
  return new RedisOutbox(scripts, `${prefix}outbox`);
}

/**
 * True when `prefix` holds a Cluster hash tag Redis will use for every key of the store:
 * a `{`, then a `}` after it with at least one character between (an empty `{}` makes
 * Redis hash the whole key, and a `{` closed only by the record's own brace makes the
 * tag differ per key).
 */
export function hasHashTag(prefix: string): boolean {
  const open = prefix.indexOf('{');
  if (open < 0) return false;
  const close = prefix.indexOf('}', open + 1);
  return close > open + 1;
}

/** The configuration error the outbox's methods throw on a store without one. */
export function outboxUnavailableError(unavailable: RedisOutboxUnavailable): IdempotencyConfigurationError {
  return new IdempotencyConfigurationError(`${OWNER} has no outbox: ${unavailable.reason}.`, unavailable.hint);
}

/**
 * The outbox's scripts on one store's keys (`base`, the layout above): the completion
 * that stages, and the relay's claim, settlement, backlog and purge, each one atomic
 * round trip. The store delegates `IdempotencyOutboxStore` to it.
 */
export class RedisOutbox {
  constructor(
    private readonly scripts: RedisScriptRunner,
    /** `<prefix>outbox`: every outbox key starts with it. */
    readonly base: string,
  ) {}

  /** Completes the record at `redisKey` under `token` and stages `staged` with it: true when the record completed (now or by this token before). */
  async completeAndStage(redisKey: string, token: string, result: string, ttl: number, staged: StagedOutbox): Promise<boolean> {
    const reply = await this.scripts.runOnKeys(
      COMPLETE_AND_STAGE,
      [redisKey, this.base],
      [token, result, ttl, staged.id, staged.messages, staged.count, redisKey],
    );
    return Number(reply) === 1;
  }

  async claim(request: OutboxClaimRequest): Promise<ClaimedOutbox[]> {
    checkWholeNumber(`${OWNER}.claimOutbox`, 'limit', request.limit, { unit: 'count', min: 1 });
    const claimTtl = wholeMs(request.claimTtl, 'claimTtl', `${OWNER}.claimOutbox`);
    const reply = (await this.scripts.run(CLAIM_OUTBOX, this.base, [request.owner, request.limit, claimTtl])) as unknown[][];
    return reply
      .map((row) => ({
        id: asString(row[0])!,
        messages: asString(row[1])!,
        next: Number(asString(row[2])),
        attempts: Number(asString(row[3])),
        stagedAt: Number(asString(row[4])),
      }))
      .sort((a, b) => a.stagedAt - b.stagedAt);
  }

  async settle(id: string, owner: string, settlement: OutboxSettlement): Promise<boolean> {
    // The back-off is a delay from the app's clock, applied on the server's (as in SQL).
    const retryDelay = settlement.retryAt === undefined ? 0 : Math.max(0, Math.round(settlement.retryAt - Date.now()));
    const error = settlement.error;
    const reply = await this.scripts.run(SETTLE_OUTBOX, this.base, [
      id,
      owner,
      settlement.next,
      retryDelay,
      error === undefined ? '0' : '1',
      error === undefined ? '' : error.slice(0, MAX_ERROR_LENGTH),
    ]);
    return Number(reply) === 1;
  }

  async backlog(): Promise<OutboxBacklog> {
    const [pending, oldest] = (await this.scripts.run(OUTBOX_BACKLOG, this.base, [])) as [unknown, unknown];
    const count = Number(pending);
    return count > 0 && !isAbsent(oldest) ? { pending: count, oldestStagedAt: Number(asString(oldest)) } : { pending: count };
  }

  /** Deletes up to `limit` executions all sent more than `retention` ms ago; how many it deleted. */
  async purgeSent(retention: number, limit: number): Promise<number> {
    const ms = wholeMs(retention, 'retention', `${OWNER}.purgeOutbox`);
    checkWholeNumber(`${OWNER}.purgeOutbox`, 'limit', limit, { unit: 'count', min: 1 });
    return Number(await this.scripts.run(PURGE_OUTBOX, this.base, [ms, limit]));
  }
}
