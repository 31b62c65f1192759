import { IdempotencyConfigurationError, IdempotencyStoreUnavailableError } from './errors.js';
import { sha256 } from './hash.js';
import { currentOutboxSlot, type StepHost } from './step-context.js';
import type { IdempotencyOutboxStore, OutboxMessage, StagedOutbox } from './outbox-store.js';
import type { IdempotencyStore } from './store.js';

/** True when `store` has an outbox (see `IdempotencyOutboxStore`). */
export function supportsOutbox<S extends IdempotencyStore>(store: S): store is S & IdempotencyOutboxStore {
  const outbox = store as Partial<IdempotencyOutboxStore>;
  return (
    typeof outbox.claimOutbox === 'function' &&
    typeof outbox.settleOutbox === 'function' &&
    typeof outbox.outboxBacklog === 'function' &&
    outbox.outboxAvailable !== false
  );
}

/** The id of an execution's outbox: its key and lease token (unique per claim). */
export function outboxIdOf(key: string, token: string): string {
  return sha256('nestjs-idempotency:outbox\u0000' + key + '\u0000' + token);
}

/** The id of the message at `position` (0-based) of the execution whose outbox is `outboxId`. */
export function outboxMessageIdOf(outboxId: string, position: number): string {
  return 'msg_' + sha256(outboxId + '\u0000' + position);
}

/** The draft of an execution in the form its store stages it, or undefined when it staged nothing. */
export function sealOutbox(host: Pick<StepHost, 'outbox'>): StagedOutbox | undefined {
  const draft = host.outbox;
  if (!draft || draft.messages.length === 0) return undefined;
  return { id: draft.id, messages: JSON.stringify(draft.messages), count: draft.messages.length };
}

/**
 * Stages a message with the execution the caller runs in, for the relay to send once its
 * record completed. Returns the message and the store it is staged on. Throws
 * `IdempotencyConfigurationError` outside an execution, on a store without an outbox and
 * for a payload JSON cannot carry; `IdempotencyStoreUnavailableError` in a run through a
 * store outage (`onStoreError: 'fail-open'`), which has no record to stage with.
 */
export function stageOutboxMessage(
  client: string,
  pattern: unknown,
  data: unknown,
): { message: OutboxMessage; store: IdempotencyStore | undefined } {
  const slot = currentOutboxSlot();
  if (!slot) {
    throw new IdempotencyConfigurationError(
      `IdempotencyOutbox.emit(${client}, ${describePattern(pattern)}) was called outside an idempotent execution, where nothing stages the message with a record.`,
      'Call it inside an @Idempotent() handler (with a key), a makeIdempotent function, IdempotencyService.run or runIdempotentTransaction, before the handler returns; to send at once, call the ClientProxy yourself.',
    );
  }
  const host: Pick<StepHost, 'key' | 'token' | 'outbox'> | undefined = slot.outboxHost ?? slot.host;
  if (!host) {
    throw new IdempotencyStoreUnavailableError(
      new Error(
        `IdempotencyOutbox.emit(${client}, ${describePattern(pattern)}) cannot be staged: the execution runs without protection through a store outage (onStoreError: 'fail-open')`,
      ),
    );
  }
  const store = slot.outboxHost ? slot.outboxHost.store : slot.host!.policy.store;
  if (!slot.outboxHost && !supportsOutbox(store!)) {
    const unavailable = (store as Partial<IdempotencyOutboxStore>).outboxUnavailable;
    throw new IdempotencyConfigurationError(
      `IdempotencyOutbox.emit(${client}, ${describePattern(pattern)}) runs on a store without an outbox (${store!.constructor?.name ?? 'custom store'}${unavailable ? `: ${unavailable.reason}` : ''}).`,
      unavailable?.hint ??
        'Use a built-in store with an outbox (MemoryIdempotencyStore, TypeOrmIdempotencyStore), or implement IdempotencyOutboxStore.',
    );
  }
  const draft = (host.outbox ??= { id: outboxIdOf(host.key, host.token), messages: [] });
  const message: { id: string; client: string; pattern: unknown; data?: unknown } = {
    id: outboxMessageIdOf(draft.id, draft.messages.length),
    client,
    pattern: asJson(client, pattern, 'pattern'),
  };
  if (data !== undefined) message.data = asJson(client, data, 'payload');
  draft.messages.push(message);
  return { message, store };
}

/** `value` as the JSON the ClientProxy would send, or the configuration error for a value JSON cannot carry. */
function asJson(client: string, value: unknown, what: string): unknown {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (error) {
    throw new IdempotencyConfigurationError(
      `IdempotencyOutbox.emit(${client}, ...): the ${what} cannot be written as JSON (${(error as Error).message}).`,
      'Send plain data (a bigint as a string, no cycles).',
    );
  }
  return text === undefined ? null : JSON.parse(text);
}

function describePattern(pattern: unknown): string {
  try {
    return typeof pattern === 'string' ? `'${pattern}'` : (JSON.stringify(pattern) ?? String(pattern));
  } catch {
    return String(pattern);
  }
}

/** The relays of this process, woken whenever an execution committed staged messages (on any store). */
const wakers = new Set<() => void>();

/** Registers `wake`, called whenever messages are committed in this process; returns the function that removes it. */
export function onOutboxStaged(wake: () => void): () => void {
  wakers.add(wake);
  return () => wakers.delete(wake);
}

/** Messages were committed with their record: the relays of this process wake (one round each, however many commits). */
export function outboxStaged(): void {
  for (const wake of wakers) wake();
}
