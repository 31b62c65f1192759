import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { IdempotencyStore } from '../core/store.js';
import { describeStepPrimitives } from './step-contract.js';

// The host test runner's globals (Jest, Vitest with globals, Mocha-style bdd).
declare const describe: (name: string, fn: () => void) => void;
declare const it: (name: string, fn: () => Promise<void>, timeout?: number) => void;
declare const beforeAll: (fn: () => Promise<void> | void, timeout?: number) => void;
declare const afterAll: (fn: () => Promise<void> | void, timeout?: number) => void;

/** Options of `describeStoreContract`. */
export interface StoreContractOptions {
  /**
   * Lease used by the expiry tests, ms. Stores with coarse expiry (a SQL clock in
   * whole ms, Redis PX) pass with the default; raise it for slow remote backends.
   * @default 300
   */
  shortTtl?: number;
  /**
   * Whether the store records durable steps (`loadSteps`, `saveStep`: docs/steps.md), whose
   * cases then run too. `false` skips them, for a store that `step()` refuses.
   * @default true
   */
  steps?: boolean;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The behaviour every `IdempotencyStore` must have. Call it inside a test file with a
 * factory for your store; the factory runs once, and `dispose` (if returned) at the end.
 *
 * @example
 * describeStoreContract('MyStore', async () => ({ store: new MyStore(client), dispose: () => client.quit() }));
 */
export function describeStoreContract(
  name: string,
  factory: () => Promise<{ store: IdempotencyStore; dispose?: () => Promise<void> | void }>,
  options: StoreContractOptions = {},
): void {
  const shortTtl = options.shortTtl ?? 300;
  describe(`IdempotencyStore contract: ${name}`, () => {
    let store: IdempotencyStore;
    let dispose: (() => Promise<void> | void) | undefined;
    const key = () => 'k' + randomUUID().replace(/-/g, '');
    const token = () => randomUUID();

    beforeAll(async () => {
      ({ store, dispose } = await factory());
    }, 60_000);
    afterAll(async () => {
      await dispose?.();
    }, 60_000);

    it('claims an absent key and reports the lease', async () => {
      const k = key();
      const t = token();
      const before = Date.now();
      const claim = await store.claim(k, { token: t, leaseTtl: 10_000, fingerprint: 'fp1' });
      assert.equal(claim.claimed, true);
      assert.equal(claim.record.status, 'in_progress');
      assert.equal(claim.record.status === 'in_progress' && claim.record.leaseToken, t);
      assert.equal(claim.record.fingerprint, 'fp1');
      const expiry = claim.record.status === 'in_progress' ? claim.record.leaseExpiresAt : 0;
      assert.ok(expiry >= before + 9_000 && expiry <= Date.now() + 11_000, `leaseExpiresAt ${expiry} is not about now + 10 s`);
    });

    it('lets exactly one of 50 concurrent claims win', async () => {
      const k = key();
      const results = await Promise.all(Array.from({ length: 50 }, () => store.claim(k, { token: token(), leaseTtl: 10_000 })));
      assert.equal(results.filter((r) => r.claimed).length, 1);
      const winner = results.find((r) => r.claimed)!.record;
      for (const r of results.filter((r) => !r.claimed)) {
        assert.equal(r.record.status, 'in_progress');
        assert.equal(r.record.status === 'in_progress' && r.record.leaseToken, winner.status === 'in_progress' && winner.leaseToken);
      }
    });

    it('returns the running record, with its fingerprint, to a second claim', async () => {
      const k = key();
      const t = token();
      await store.claim(k, { token: t, leaseTtl: 10_000, fingerprint: 'abc' });
      const second = await store.claim(k, { token: token(), leaseTtl: 10_000, fingerprint: 'other' });
      assert.equal(second.claimed, false);
      assert.equal(second.record.status, 'in_progress');
      assert.equal(second.record.fingerprint, 'abc');
      const read = await store.get(k);
      assert.equal(read?.status, 'in_progress');
      assert.equal(read?.status === 'in_progress' && read.leaseToken, t);
    });

    it('completes only under the owning token, then returns the result to every claim', async () => {
      const k = key();
      const t = token();
      await store.claim(k, { token: t, leaseTtl: 10_000, fingerprint: 'fp' });
      assert.equal(await store.complete(k, token(), { result: 'wrong', ttl: 10_000 }), false);
      assert.equal(await store.complete(k, t, { result: '{"v":1}', ttl: 10_000 }), true);
      assert.equal(await store.complete(k, token(), { result: 'other', ttl: 10_000 }), false, 'another token must not complete it');
      await store.complete(k, t, { result: 'again', ttl: 10_000 });
      const claim = await store.claim(k, { token: token(), leaseTtl: 10_000 });
      assert.equal(claim.claimed, false);
      assert.equal(claim.record.status, 'completed');
      assert.equal(claim.record.status === 'completed' && claim.record.result, '{"v":1}');
      assert.equal(claim.record.fingerprint, 'fp');
      const read = await store.get(k);
      assert.equal(read?.status === 'completed' && read.result, '{"v":1}');
      assert.equal(await store.release(k, t), false, 'release must not remove a completed record');
    });

    it('answers a repeated complete under the completing token without storing anything new', async () => {
      // The engine repeats a complete whose reply was lost; the repeat must not be
      // mistaken for a lost lease (a store that keeps the token on the completed record
      // answers true), and must never replace the result duplicates already replayed.
      const k = key();
      const t = token();
      await store.claim(k, { token: t, leaseTtl: 10_000 });
      assert.equal(await store.complete(k, t, { result: 'first', ttl: 10_000 }), true);
      const completed = await store.get(k);
      const repeat = await store.complete(k, t, { result: 'second', ttl: 10_000 });
      const read = await store.get(k);
      assert.equal(read?.status === 'completed' && read.result, 'first');
      const kept = completed?.status === 'completed' ? completed.leaseToken : undefined;
      if (kept !== undefined) {
        assert.equal(kept, t, 'leaseToken of a completed record must be the token that completed it');
        assert.equal(repeat, true, 'a store that keeps the completing token must answer its repeated complete with true');
      }
      assert.equal(await store.release(k, t), false, 'the completing token must not release a completed record');
      assert.equal(await store.renew(k, t, 10_000), false, 'the completing token must not renew a completed record');
      assert.equal((await store.get(k))?.status, 'completed');
    });

    it('stores results with any characters intact', async () => {
      const k = key();
      const t = token();
      const result = JSON.stringify({ text: 'ünïcødé ✓ "quotes" \\ \n\r\t \u0000 {tag} * ? [x]', big: 'x'.repeat(100_000) });
      await store.claim(k, { token: t, leaseTtl: 10_000 });
      assert.equal(await store.complete(k, t, { result, ttl: 10_000 }), true);
      const read = await store.get(k);
      assert.equal(read?.status === 'completed' && read.result, result);
    });

    it('releases only under the owning token, making the key claimable again', async () => {
      const k = key();
      const t = token();
      await store.claim(k, { token: t, leaseTtl: 10_000 });
      assert.equal(await store.release(k, token()), false);
      assert.equal((await store.get(k))?.status, 'in_progress');
      assert.equal(await store.release(k, t), true);
      assert.equal(await store.get(k), undefined);
      assert.equal((await store.claim(k, { token: token(), leaseTtl: 10_000 })).claimed, true);
    });

    it('renews only under the owning token and extends the lease', async () => {
      const k = key();
      const t = token();
      await store.claim(k, { token: t, leaseTtl: shortTtl });
      assert.equal(await store.renew(k, token(), 10_000), false);
      assert.equal(await store.renew(k, t, 10_000), true);
      await sleep(shortTtl + 200);
      const read = await store.get(k);
      assert.equal(read?.status, 'in_progress', 'a renewed lease must outlive its first expiry');
      assert.ok(read?.status === 'in_progress' && read.leaseExpiresAt > Date.now() + 5_000);
    });

    it('lets another worker take over an expired lease, and fences the old owner out', async () => {
      const k = key();
      const oldToken = token();
      await store.claim(k, { token: oldToken, leaseTtl: shortTtl });
      assert.equal((await store.claim(k, { token: token(), leaseTtl: 10_000 })).claimed, false);
      await sleep(shortTtl + 200);
      const newToken = token();
      const takeover = await store.claim(k, { token: newToken, leaseTtl: 10_000 });
      assert.equal(takeover.claimed, true);
      assert.equal(await store.complete(k, oldToken, { result: 'stale', ttl: 10_000 }), false);
      assert.equal(await store.renew(k, oldToken, 10_000), false);
      assert.equal(await store.release(k, oldToken), false);
      assert.equal(await store.complete(k, newToken, { result: 'fresh', ttl: 10_000 }), true);
      const read = await store.get(k);
      assert.equal(read?.status === 'completed' && read.result, 'fresh');
    });

    it('lets exactly one of 50 concurrent claims take an expired record over', async () => {
      const k = key();
      const first = token();
      await store.claim(k, { token: first, leaseTtl: 10_000 });
      assert.equal(await store.complete(k, first, { result: 'old', ttl: shortTtl }), true);
      await sleep(shortTtl + 200);
      const results = await Promise.all(Array.from({ length: 50 }, () => store.claim(k, { token: token(), leaseTtl: 10_000 })));
      assert.equal(results.filter((r) => r.claimed).length, 1);
      const winner = results.find((r) => r.claimed)!.record;
      for (const r of results.filter((r) => !r.claimed)) {
        assert.equal(r.record.status, 'in_progress', 'the expired result must not be answered');
        assert.equal(r.record.status === 'in_progress' && r.record.leaseToken, winner.status === 'in_progress' && winner.leaseToken);
      }
    });

    it('does not complete or renew a lease that expired, even when nobody took it over', async () => {
      const k = key();
      const t = token();
      await store.claim(k, { token: t, leaseTtl: shortTtl });
      await sleep(shortTtl + 200);
      assert.equal(await store.renew(k, t, 10_000), false);
      assert.equal(await store.complete(k, t, { result: 'late', ttl: 10_000 }), false);
      assert.equal(await store.get(k), undefined);
    });

    it('forgets a completed record after its ttl', async () => {
      const k = key();
      const t = token();
      await store.claim(k, { token: t, leaseTtl: 10_000 });
      assert.equal(await store.complete(k, t, { result: 'r', ttl: shortTtl }), true);
      assert.equal((await store.get(k))?.status, 'completed');
      await sleep(shortTtl + 200);
      assert.equal(await store.get(k), undefined);
      assert.equal((await store.claim(k, { token: token(), leaseTtl: 10_000 })).claimed, true);
    });

    it('keeps keys independent', async () => {
      const a = key();
      const b = key();
      const ta = token();
      await store.claim(a, { token: ta, leaseTtl: 10_000 });
      assert.equal((await store.claim(b, { token: token(), leaseTtl: 10_000 })).claimed, true);
      assert.equal(await store.complete(a, ta, { result: 'a', ttl: 10_000 }), true);
      assert.equal((await store.get(b))?.status, 'in_progress');
    });

    it('deletes a record in any state', async () => {
      const k = key();
      const t = token();
      assert.equal(await store.delete(k), false);
      await store.claim(k, { token: t, leaseTtl: 10_000 });
      assert.equal(await store.delete(k), true);
      assert.equal(await store.get(k), undefined);
      await store.claim(k, { token: t, leaseTtl: 10_000 });
      await store.complete(k, t, { result: 'x', ttl: 10_000 });
      assert.equal(await store.delete(k), true);
      assert.equal((await store.claim(k, { token: token(), leaseTtl: 10_000 })).claimed, true);
    });

    it('hands a contended key to exactly one worker per lease generation', async () => {
      // Many rounds of: everyone claims, the winner completes or releases. Exactly one
      // winner per round, and a completed key is never claimed again.
      const k = key();
      for (let round = 0; round < 5; round++) {
        const claims = await Promise.all(Array.from({ length: 20 }, () => store.claim(k, { token: token(), leaseTtl: 10_000 })));
        const winners = claims.filter((c) => c.claimed);
        assert.equal(winners.length, 1, `round ${round}: ${winners.length} winners`);
        const t = winners[0].record.status === 'in_progress' ? winners[0].record.leaseToken : '';
        assert.equal(await store.release(k, t), true);
      }
      const final = await store.claim(k, { token: token(), leaseTtl: 10_000 });
      const t = final.record.status === 'in_progress' ? final.record.leaseToken : '';
      await store.complete(k, t, { result: 'done', ttl: 10_000 });
      const after = await Promise.all(Array.from({ length: 20 }, () => store.claim(k, { token: token(), leaseTtl: 10_000 })));
      assert.equal(after.filter((c) => c.claimed).length, 0);
    });

    if (options.steps !== false) describeStepPrimitives(() => store, shortTtl);
  });
}
