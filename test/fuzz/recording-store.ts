import { MemoryIdempotencyStore, type ClaimRequest, type ClaimResult, type CompleteRequest } from '../../lib/index.js';

/** The memory store, remembering every key and stored result it was handed, to check what reaches a store. */
export class RecordingStore extends MemoryIdempotencyStore {
  readonly keys: string[] = [];
  readonly results: string[] = [];

  override claim(key: string, request: ClaimRequest): Promise<ClaimResult> {
    this.keys.push(key);
    return super.claim(key, request);
  }

  override complete(key: string, token: string, request: CompleteRequest): Promise<boolean> {
    this.keys.push(key);
    this.results.push(request.result);
    return super.complete(key, token, request);
  }

  /** Forgets what was recorded so far (the records themselves stay). */
  reset(): void {
    this.keys.length = 0;
    this.results.length = 0;
  }
}

/** What `storageKeyOf` produces: an unpadded base64url SHA-256. */
export const STORE_KEY_PATTERN = /^[A-Za-z0-9_-]{43}$/;
