import { LUA_NOW_MS, LuaScript } from './redis-client.js';

/*
 * One record = one Redis hash, whose Redis expiry is the lease while in progress and
 * the retention once completed, so Redis itself forgets expired leases and results:
 *   s  status: 'p' (in progress) or 'c' (completed)
 *   t  lease token; kept once completed, so that a repeated complete under it is told
 *      apart from a lost lease
 *   e  leaseExpiresAt or expiresAt, epoch ms from the Redis server clock
 *   f  fingerprint (optional)
 *   r  serialized result (completed only)
 *   x:<token>  a claim released before it arrived (RELEASE on an absent record), one
 *      field per token: a key can hold several claims undone at once (duplicates from
 *      one or more processes during an outage), and any of them may still arrive late
 * Each script touches that one key (and its steps, redis-steps.ts), so every primitive
 * is one atomic round trip and every script stays within one Cluster hash slot; the one
 * exception, a completion that stages outbox messages, touches the outbox's keys too
 * (redis-outbox.ts), which is why the outbox needs the record and its keys in one slot.
 */
const FIELDS = `'s', 't', 'e', 'f', 'r'`;

export const CLAIM = new LuaScript(
  'claim',
  `${LUA_NOW_MS}
local existing = redis.call('HMGET', KEYS[1], ${FIELDS}, 'x')
-- 'x' holds the one marker 0.6 wrote: read during a rolling upgrade.
if existing[6] == ARGV[1] or redis.call('HEXISTS', KEYS[1], 'x:' .. ARGV[1]) == 1 then
  -- This claim's caller was told it failed and has undone it already (RELEASE left the
  -- marker): it arrives late (held in a socket, resent after a reconnection), for nobody.
  return {0, 'p', ARGV[1], '0'}
end
if existing[1] == 'p' and existing[2] == ARGV[1] then
  -- This very claim, sent again (the client resent it after its reply was lost): it is ours.
  return {1, existing[3]}
end
if existing[1] then
  return {0, existing[1], existing[2], existing[3], existing[4], existing[5]}
end
local expires = ms_string(now_ms() + tonumber(ARGV[2]))
if ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 's', 'p', 't', ARGV[1], 'e', expires, 'f', ARGV[4])
else
  redis.call('HSET', KEYS[1], 's', 'p', 't', ARGV[1], 'e', expires)
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return {1, expires}
`,
);

/**
 * Lua: `complete_record(key, token, result, ttl)`, the compare-and-set of a completion on
 * the lease token: 0 when the lease is not the token's, 2 when it completed the record
 * now, 1 when the token had completed it already (a repeat whose first reply was lost:
 * the stored result stays as it is). Shared by COMPLETE and the outbox's completion
 * (redis-outbox.ts), so both complete alike. Needs LUA_NOW_MS before it.
 */
export const LUA_COMPLETE_RECORD = `local function complete_record(key, token, result, ttl)
  local lease = redis.call('HMGET', key, 's', 't')
  if lease[2] ~= token then return 0 end
  if lease[1] == 'c' then return 1 end
  if lease[1] ~= 'p' then return 0 end
  redis.call('HSET', key, 's', 'c', 'r', result, 'e', ms_string(now_ms() + tonumber(ttl)))
  redis.call('PEXPIRE', key, ttl)
  return 2
end
`;

// Idempotent per token: a repeat whose first reply was lost answers 1 again.
export const COMPLETE = new LuaScript(
  'complete',
  `${LUA_NOW_MS}${LUA_COMPLETE_RECORD}
if complete_record(KEYS[1], ARGV[1], ARGV[2], ARGV[3]) == 0 then return 0 end
return 1
`,
);

// A release leaves the marker 'x:<token>' (for RELEASED_MARKER_MS) in place of the
// record: the claim it undoes may still arrive after it (a command held in a socket the
// client dropped, or resent by the client after it reconnected, on another connection
// than the release), and must then lock nothing. One field per token, and the record's
// own fields removed rather than the key: the markers of the other claims undone on
// that key stay (one shared marker was overwritten by the next release, and the late
// claim it had undone then locked the key for a lease nobody owned).
const RELEASED_MARKER_MS = 300_000;
export const RELEASE = new LuaScript(
  'release',
  `local lease = redis.call('HMGET', KEYS[1], 's', 't')
local released = 0
if lease[1] == 'p' and lease[2] == ARGV[1] then
  redis.call('HDEL', KEYS[1], ${FIELDS})
  released = 1
elseif lease[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'x:' .. ARGV[1], '1')
redis.call('PEXPIRE', KEYS[1], ${RELEASED_MARKER_MS})
return released
`,
);

export const RENEW = new LuaScript(
  'renew',
  `${LUA_NOW_MS}
local lease = redis.call('HMGET', KEYS[1], 's', 't')
if lease[1] ~= 'p' or lease[2] ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'e', ms_string(now_ms() + tonumber(ARGV[2])))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`,
);

export const GET = new LuaScript('get', `return redis.call('HMGET', KEYS[1], ${FIELDS})`);
