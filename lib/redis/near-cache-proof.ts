import { randomUUID } from 'node:crypto';
import type { NearCacheArming } from './near-cache-arming.js';
import type { NearCacheClient } from './near-cache-connection.js';
import type { NearCacheInvalidations } from './near-cache-invalidations.js';

/** How long a probe key lives if its delete is lost, ms. */
const PROBE_TTL_MS = 5_000;

/** What a proof of delivery needs from `NearCacheTracking`. */
export interface ProbeContext {
  readonly client: NearCacheClient;
  /** The store's prefix (probe keys live under it) and the client's ioredis `keyPrefix`. */
  readonly prefix: string;
  readonly keyPrefix: string;
  readonly invalidations: NearCacheInvalidations;
  readonly timeout: number;
  /** False once the proof no longer applies (a connection lost meanwhile): it stops there, and the caller checks again. */
  readonly current: () => boolean;
}

/**
 * Redirect design: a probe key read through the user's client (tracked from then on) and
 * written by another connection must come back as an invalidation (with NOLOOP, a write
 * through the user's client would not), and `CLIENT TRACKINGINFO` read through the
 * user's client must show the tracking this store set. Rejects otherwise.
 */
export async function proveRedirected(context: ProbeContext, arming: NearCacheArming, id: number): Promise<void> {
  const { client, keyPrefix, current } = context;
  const key = `${context.prefix}__near-cache-probe__:${randomUUID()}`;
  const expected = context.invalidations.expect(keyPrefix + key, context.timeout);
  try {
    await client.eval(`return redis.call('GET', KEYS[1])`, 1, key);
    if (!current()) return;
    await arming.writeFromElsewhere(keyPrefix + key, PROBE_TTL_MS);
    if (!current()) return;
    await expected.seen;
    if (!current()) return;
    await arming.verify(id);
  } finally {
    expected.cancel();
    client.eval(`return redis.call('DEL', KEYS[1])`, 1, key).catch(() => undefined);
  }
}

/** Self design: a probe key written through the user's client must come back as an invalidation. Rejects otherwise. */
export async function proveSelf(context: ProbeContext): Promise<void> {
  const { client } = context;
  const key = `${context.prefix}__near-cache-probe__:${randomUUID()}`;
  const expected = context.invalidations.expect(context.keyPrefix + key, context.timeout);
  try {
    await client.eval(`return redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])`, 1, key, PROBE_TTL_MS);
    if (!context.current()) return;
    await expected.seen;
  } finally {
    expected.cancel();
    client.eval(`return redis.call('DEL', KEYS[1])`, 1, key).catch(() => undefined);
  }
}
