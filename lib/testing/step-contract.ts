import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { supportsSteps, type IdempotencyStore } from '../core/store.js';

declare const it: (name: string, fn: () => Promise<void>, timeout?: number) => void;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The step primitives of `describeStoreContract` (`loadSteps`, `saveStep`: see
 * `IdempotencyStepStore`), registered inside its `describe`. `store()` reads the store the
 * contract's factory opened.
 */
export function describeStepPrimitives(store: () => IdempotencyStore, shortTtl: number): void {
  const key = () => 'k' + randomUUID().replace(/-/g, '');
  const token = () => randomUUID();
  const steps = () => {
    const s = store();
    assert.ok(supportsSteps(s), 'the store has no loadSteps/saveStep (pass { steps: false } to describeStoreContract to skip these cases)');
    return s;
  };

  it('steps: records a step only under the owning token, and reads every step of the key in one call', async () => {
    const s = steps();
    const k = key();
    const t = token();
    assert.deepEqual(await s.loadSteps(k), {});
    await s.claim(k, { token: t, leaseTtl: 10_000, fingerprint: 'fp' });
    assert.equal(await s.saveStep(k, token(), { step: 'a', result: 'other', ttl: 10_000 }), false);
    assert.equal(await s.saveStep(k, t, { step: 'a', result: '{"v":1} ünïcødé \n "\'', ttl: 10_000 }), true);
    assert.equal(await s.saveStep(k, t, { step: 'b', result: 'two', ttl: 10_000 }), true);
    assert.deepEqual(await s.loadSteps(k), { a: '{"v":1} ünïcødé \n "\'', b: 'two' });
    assert.deepEqual(await s.loadSteps(key()), {});
  });

  it('steps: outlive a release and a lost lease, never record under a released, completed or expired lease, and fence the old owner out', async () => {
    const s = steps();
    const k = key();
    const first = token();
    await s.claim(k, { token: first, leaseTtl: 10_000 });
    assert.equal(await s.saveStep(k, first, { step: 'a', result: '1', ttl: 10_000 }), true);
    assert.equal(await s.release(k, first), true);
    assert.equal(await s.saveStep(k, first, { step: 'b', result: 'late', ttl: 10_000 }), false);
    assert.deepEqual(await s.loadSteps(k), { a: '1' });
    const second = token();
    await s.claim(k, { token: second, leaseTtl: shortTtl });
    await sleep(shortTtl + 200);
    assert.equal(await s.saveStep(k, second, { step: 'b', result: 'expired', ttl: 10_000 }), false);
    const third = token();
    assert.equal((await s.claim(k, { token: third, leaseTtl: 10_000 })).claimed, true);
    assert.equal(await s.saveStep(k, second, { step: 'a', result: 'zombie', ttl: 10_000 }), false);
    assert.equal(await s.saveStep(k, third, { step: 'b', result: '2', ttl: 10_000 }), true);
    assert.equal(await s.complete(k, third, { result: 'done', ttl: 10_000 }), true);
    assert.equal(await s.saveStep(k, third, { step: 'c', result: 'after', ttl: 10_000 }), false);
    assert.deepEqual(await s.loadSteps(k), { a: '1', b: '2' });
  });

  it('steps: expire after their ttl, and go with the record on delete', async () => {
    const s = steps();
    const k = key();
    const t = token();
    await s.claim(k, { token: t, leaseTtl: 10_000 });
    assert.equal(await s.saveStep(k, t, { step: 'short', result: 'x', ttl: shortTtl }), true);
    await sleep(shortTtl + 200);
    assert.deepEqual(await s.loadSteps(k), {});
    const d = key();
    const u = token();
    await s.claim(d, { token: u, leaseTtl: 10_000 });
    assert.equal(await s.saveStep(d, u, { step: 'a', result: 'x', ttl: 10_000 }), true);
    assert.equal(await s.delete(d), true);
    assert.deepEqual(await s.loadSteps(d), {});
  });
}
