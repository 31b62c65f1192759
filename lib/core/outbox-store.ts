// The outbox's side of the store contract: what a store with an outbox keeps and answers (outbox.ts stages, outbox-relay.ts sends).

/** One message a handler staged in the outbox, as the relay sends it. */
export interface OutboxMessage {
  /**
   * Derived from the execution and the message's position in it (`msg_` and 43 base64url
   * characters): the same on every re-send, so the consumer's `@Idempotent()` applies it once.
   */
  readonly id: string;
  /** The token the `ClientProxy` is registered under (`ClientsModule` name); a `Symbol.for()` token as `Symbol.for(<name>)`. */
  readonly client: string;
  /** The pattern given to `emit()`, as JSON. */
  readonly pattern: unknown;
  /** The payload given to `emit()`, as JSON (absent for `undefined`). */
  readonly data?: unknown;
}

/**
 * The messages of one execution, handed to the store with its completion
 * (`CompleteRequest.outbox`): the store keeps them with the record, in the same atomic
 * write, for the relay.
 */
export interface StagedOutbox {
  /** Unique per execution (`[A-Za-z0-9_-]`, 43 characters). */
  readonly id: string;
  /** The messages, in the order they were staged: a JSON array of `OutboxMessage`. */
  readonly messages: string;
  /** How many messages `messages` holds. */
  readonly count: number;
}

/** One execution's staged messages as a relay claimed them. */
export interface ClaimedOutbox {
  /** The execution's outbox id (`StagedOutbox.id`). */
  readonly id: string;
  /** A JSON array of `OutboxMessage`, in staging order. */
  readonly messages: string;
  /** How many of them were sent (and confirmed) already: the relay sends from this position on. */
  readonly next: number;
  /** How many times sending them failed so far. */
  readonly attempts: number;
  /** When they were staged, epoch ms. */
  readonly stagedAt: number;
}

/** What a relay asks `claimOutbox` for. */
export interface OutboxClaimRequest {
  /** The relay's own id: only it may settle what it claimed. */
  readonly owner: string;
  /** Most executions claimed at once. */
  readonly limit: number;
  /** How long the claim keeps other relays away, ms. */
  readonly claimTtl: number;
}

/** How a relay settles a claimed execution. */
export interface OutboxSettlement {
  /** How many of its messages are sent now; all of them marks the execution sent. */
  readonly next: number;
  /** Not all sent: when the next attempt may claim it again, epoch ms. */
  readonly retryAt?: number;
  /** Not all sent: why (the broker's error), kept for inspection. */
  readonly error?: string;
}

/** The messages staged and not sent yet. */
export interface OutboxBacklog {
  /** Executions with messages waiting. */
  readonly pending: number;
  /** When the oldest of them was staged, epoch ms; absent when none waits. */
  readonly oldestStagedAt?: number;
}

/**
 * The outbox of a store (docs/outbox.md), an optional capability. A store that has it
 * stages `CompleteRequest.outbox` in the same atomic write as the completion (and never
 * twice: a `complete` repeated under the completing token stages nothing again).
 * - `claimOutbox` takes, oldest first, up to `limit` executions with messages left to
 *   send whose retry time has come and that no live claim holds, and claims them for
 *   `owner` during `claimTtl`: two relays never hold one execution at once.
 * - `settleOutbox` records progress (compare-and-set on `owner`'s claim): `next` equal to
 *   the count marks the execution sent (kept for the store's retention, or dropped);
 *   otherwise the claim ends and the execution waits until `retryAt`. False when the
 *   claim was not `owner`'s any more.
 * - `outboxBacklog` counts what waits.
 */
export interface IdempotencyOutboxStore {
  /** Claims up to `request.limit` executions with messages to send, oldest first, for `request.owner`. */
  claimOutbox(request: OutboxClaimRequest): Promise<readonly ClaimedOutbox[]>;
  /** Records what `owner` sent of a claimed execution and ends its claim; false when the claim is not `owner`'s any more. */
  settleOutbox(id: string, owner: string, settlement: OutboxSettlement): Promise<boolean>;
  /** What waits to be sent: how many executions, and the oldest one's staging time. */
  outboxBacklog(): Promise<OutboxBacklog>;
  /**
   * Optional: deletes up to `limit` executions whose messages were all sent more than
   * `retention` ms ago; how many it deleted. A store that drops them once sent has none.
   */
  purgeOutbox?(retention: number, limit: number): Promise<number>;
  /** False where this store cannot stage messages (a SQL dialect without an outbox yet): `emit()` is refused. @default true */
  readonly outboxAvailable?: boolean;
  /** Where `outboxAvailable` is false: why, and what to do instead, which `emit()`'s refusal says. */
  readonly outboxUnavailable?: { readonly reason: string; readonly hint: string };
}
