import { randomUUID } from 'node:crypto';
import {
  IdempotencyFingerprintMismatchError,
  IdempotencyInFlightError,
  IdempotencyStoreUnavailableError,
  MemoryIdempotencyStore,
  type ClaimRequest,
  type ClaimResult,
} from '../../lib/index.js';
import { IdempotencyEngine, storageKeyOf, type ExecutionPolicy } from '../../lib/core/index.js';

/**
 * The memory store, with the replies of its next claims and releases lost on the way
 * back: the store applied them, the caller sees a connection error. That is what a
 * dropped connection does to a command that already reached the server.
 */
class LostRepliesStore extends MemoryIdempotencyStore {
  lostClaimReplies = 0;
  releasesRefused = 0;
  releaseAttempts = 0;
  override async claim(key: string, request: ClaimRequest): Promise<ClaimResult> {
    const result = await super.claim(key, request);
    if (this.lostClaimReplies > 0) {
      this.lostClaimReplies--;
      throw new Error('connection lost');
    }
    return result;
  }
  override async release(key: string, token: string): Promise<boolean> {
    this.releaseAttempts++;
    if (this.releasesRefused > 0) {
      this.releasesRefused--;
      throw new Error('connection lost');
    }
    return super.release(key, token);
  }
}

const policy = (store: MemoryIdempotencyStore): ExecutionPolicy => ({
  store,
  ttl: 60_000,
  leaseTtl: 30_000,
  inFlight: 'reject',
  waitTimeout: 0,
  onStoreError: 'fail-closed',
  maxResponseBytes: 1 << 20,
});

/**
 * A claim of a new key by a new engine whose reply was lost (the store applied it), with
 * the first `releasesRefused` releases after it lost as well.
 */
async function loseClaim(releasesRefused: number, fingerprint?: string) {
  const store = new LostRepliesStore();
  const engine = new IdempotencyEngine();
  const key = storageKeyOf('lost-claim', randomUUID());
  store.lostClaimReplies = 1;
  store.releasesRefused = releasesRefused;
  await expect(engine.execute({ key, fingerprint }, policy(store), () => 'never runs')).rejects.toBeInstanceOf(
    IdempotencyStoreUnavailableError,
  );
  return { store, engine, key };
}

describe('a claim whose reply was lost', () => {
  it('is undone at once by its token-checked release, so the retry runs', async () => {
    const { store, key } = await loseClaim(0);
    let runs = 0;
    // Another instance (engine) retries: nothing of the first engine's memory helps it.
    expect(await new IdempotencyEngine().execute({ key }, policy(store), () => ++runs)).toEqual({ value: 1, replayed: false });
  });

  it('when its release is lost too, is undone by the next retry in the same process instead of answering 409', async () => {
    const { store, engine, key } = await loseClaim(1);
    let runs = 0;
    expect(await store.get(key)).toMatchObject({ status: 'in_progress' });
    // Another process knows nothing of that claim: the lease holds for it.
    await expect(new IdempotencyEngine().execute({ key }, policy(store), () => ++runs)).rejects.toBeInstanceOf(IdempotencyInFlightError);
    expect(await engine.execute({ key }, policy(store), () => ++runs)).toEqual({ value: 1, replayed: false });
    expect(engine.orphanClaimsPending).toBe(0);
    expect(runs).toBe(1);
  });
});

describe('a claim whose reply and undoing release were both lost', () => {
  it('is released again in the background once the store answers, so a retry in another process runs', async () => {
    const { store, engine, key } = await loseClaim(3);
    let runs = 0;
    const other = new IdempotencyEngine();
    const deadline = Date.now() + 10_000;
    for (;;) {
      try {
        expect(await other.execute({ key }, policy(store), () => ++runs)).toEqual({ value: 1, replayed: false });
        break;
      } catch (error) {
        if (!(error instanceof IdempotencyInFlightError) || Date.now() > deadline) throw error;
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
    }
    // The first release and two retries refused, the third retry freed the key.
    expect(store.releaseAttempts).toBe(4);
    expect(engine.orphanClaimsPending).toBe(0);
  });

  it('answers a request with another body in the same process by running it, not with 422: the lost claim ran nothing', async () => {
    const { store, engine, key } = await loseClaim(1, 'body-a');
    expect(await store.get(key)).toMatchObject({ status: 'in_progress', fingerprint: 'body-a' });
    // Before the background retry's first timer: this request meets the claim itself.
    expect(await engine.execute({ key, fingerprint: 'body-b' }, policy(store), () => 'b')).toEqual({ value: 'b', replayed: false });
    expect(await store.get(key)).toMatchObject({ status: 'completed', fingerprint: 'body-b' });
  });

  it('still answers 422 to another body when the claim is not one of its own lost ones', async () => {
    const { store, key } = await loseClaim(1, 'body-a');
    await expect(new IdempotencyEngine().execute({ key, fingerprint: 'body-b' }, policy(store), () => 'b')).rejects.toBeInstanceOf(
      IdempotencyFingerprintMismatchError,
    );
  });
});

describe('a release whose reply was lost', () => {
  it('is sent again while the lease lasts, so the client retry after a thrown error runs instead of answering 409', async () => {
    const store = new LostRepliesStore();
    const engine = new IdempotencyEngine();
    const key = storageKeyOf('lost-release', randomUUID());
    let runs = 0;
    store.releasesRefused = 1;
    await expect(
      engine.execute({ key }, policy(store), () => {
        runs++;
        throw new Error('declined');
      }),
    ).rejects.toThrow('declined');
    const deadline = Date.now() + 10_000;
    while ((await store.get(key)) !== undefined) {
      if (Date.now() > deadline) throw new Error('the lease was never released');
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    expect(await new IdempotencyEngine().execute({ key }, policy(store), () => ++runs)).toEqual({ value: 2, replayed: false });
  });
});
