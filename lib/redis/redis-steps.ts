import { LUA_NOW_MS, LuaScript, asString, wholeMs, type RedisScriptRunner } from './redis-client.js';
import type { StepRequest } from '../core/store.js';

/*
 * The step records of an execution (docs/steps.md): one Redis hash beside the record,
 * `<record key>:steps`, field = step id, value = serialized result. The record key ends
 * with its `{hash tag}`, so both keys are in one Cluster hash slot and a script declared
 * on the record key may touch the steps key (the slot is the one the call was routed to).
 * The hash has an expiry of its own (the execution's retention, pushed back by each
 * write): a release or a lease running out deletes the record, never the steps.
 */

const LOAD_STEPS = new LuaScript('load-steps', `return redis.call('HGETALL', KEYS[1] .. ':steps')`);

// Compare-and-set on the lease token, like renew: only the live owner records a step.
const SAVE_STEP = new LuaScript(
  'save-step',
  `${LUA_NOW_MS}
local lease = redis.call('HMGET', KEYS[1], 's', 't', 'e')
if lease[1] ~= 'p' or lease[2] ~= ARGV[1] or tonumber(lease[3]) <= now_ms() then return 0 end
local steps = KEYS[1] .. ':steps'
redis.call('HSET', steps, ARGV[2], ARGV[3])
if redis.call('PTTL', steps) < tonumber(ARGV[4]) then redis.call('PEXPIRE', steps, ARGV[4]) end
return 1
`,
);

/** The record and its steps (and a release's marker): 1 when there was a record. */
export const DELETE_WITH_STEPS = new LuaScript(
  'delete',
  `local deleted = 0
if redis.call('HEXISTS', KEYS[1], 's') == 1 then deleted = 1 end
redis.call('DEL', KEYS[1])
redis.call('DEL', KEYS[1] .. ':steps')
return deleted
`,
);

/** Every step record of the record at `redisKey`, by step id: one round trip. */
export async function loadSteps(scripts: RedisScriptRunner, redisKey: string): Promise<Record<string, string>> {
  const reply = (await scripts.run(LOAD_STEPS, redisKey, [])) as unknown[];
  const steps: Record<string, string> = {};
  for (let i = 0; i + 1 < reply.length; i += 2) steps[asString(reply[i])!] = asString(reply[i + 1])!;
  return steps;
}

/** Records a step while `token` owns the record at `redisKey`; false when the lease is not (or no longer) its own. */
export async function saveStep(scripts: RedisScriptRunner, redisKey: string, token: string, request: StepRequest): Promise<boolean> {
  const ttl = wholeMs(request.ttl, 'ttl', 'RedisIdempotencyStore.saveStep');
  return Number(await scripts.run(SAVE_STEP, redisKey, [token, request.step, request.result, ttl])) === 1;
}
