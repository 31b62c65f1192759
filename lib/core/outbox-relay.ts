import { randomUUID } from 'node:crypto';
import { IdempotencyConfigurationError } from './errors.js';
import { checkWholeNumber } from './options.js';
import { onOutboxStaged } from './outbox.js';
import type { ClaimedOutbox, IdempotencyOutboxStore, OutboxBacklog, OutboxMessage } from './outbox-store.js';
import type { IdempotencyStore } from './store.js';

/** How a relay sends what executions staged (`IdempotencyModule.forRoot({ outbox })`). Durations in ms. */
export interface OutboxRelayOptions {
  /**
   * Most executions claimed by one round of the relay (their messages are sent
   * concurrently, each execution's in order).
   * @default 100
   */
  batchSize?: number;
  /**
   * How often an idle relay looks for messages staged by other instances or due for a
   * retry. Messages completed in this process wake it at once.
   * @default 1000
   */
  pollInterval?: number;
  /** The first back-off after a failed send; each further failure doubles it. @default 500 */
  retryDelay?: number;
  /** The longest back-off. @default 30000 */
  maxRetryDelay?: number;
  /**
   * How long a relay's claim on an execution keeps the other instances' relays away:
   * an instance that died holding it is taken over after this long.
   * @default 30000
   */
  claimTtl?: number;
  /**
   * The longest wait for one send (the broker's confirmation); a send that takes longer
   * counts as failed and is tried again. Below `claimTtl / 2`, so a claim outlasts its sends.
   * @default 10000
   */
  sendTimeout?: number;
  /**
   * How long sent messages are kept (where the store keeps them: the SQL outbox table),
   * for inspection; older ones are purged by the relays, at most once a minute.
   * @default 86400000 (24 h)
   */
  retention?: number;
  /**
   * How often, at most, the relay reads its store's backlog (what waits, and since when)
   * for the `outbox_backlog` event, and so for the backlog metrics; at the end of a round,
   * after its sends. Only when the module has an `onEvent` listener.
   * @default 10000
   */
  backlogInterval?: number;
}

/** Sends one message through the application's client, resolving once the broker confirmed it. */
export type OutboxSend = (message: OutboxMessage) => Promise<void>;

/** What a relay reports: a message sent, or a failed send and when it is tried again. */
export interface OutboxRelayReport {
  sent?(message: OutboxMessage, stagedAt: number): void;
  failed?(message: OutboxMessage, error: unknown, retryAt: number, attempts: number): void;
  /** The store failed to claim or settle: the relay tries again on its next round. */
  storeFailed?(error: unknown): void;
  /**
   * What waits in the store, read at most every `backlogInterval` (`readMs`: how long the
   * store took): reported while something waits, and once when the last message left
   * (so a gauge returns to 0); a store whose outbox stayed empty reports nothing, so an
   * application that never emits sees no such event. Without this callback the relay
   * never reads the backlog.
   */
  backlog?(backlog: OutboxBacklog, readMs: number): void;
}

type Resolved = Required<OutboxRelayOptions>;

/** The defaults and checks of the relay's options, under `owner`'s name. */
export function resolveRelayOptions(owner: string, options: OutboxRelayOptions = {}): Resolved {
  const resolved: Resolved = {
    batchSize: options.batchSize ?? 100,
    pollInterval: options.pollInterval ?? 1_000,
    retryDelay: options.retryDelay ?? 500,
    maxRetryDelay: options.maxRetryDelay ?? 30_000,
    claimTtl: options.claimTtl ?? 30_000,
    sendTimeout: options.sendTimeout ?? 10_000,
    retention: options.retention ?? 86_400_000,
    backlogInterval: options.backlogInterval ?? 10_000,
  };
  for (const [name, value] of Object.entries(resolved)) {
    checkWholeNumber(owner, `outbox.${name}`, value, { unit: name === 'batchSize' ? 'count' : 'ms', min: 1 });
  }
  if (resolved.sendTimeout * 2 > resolved.claimTtl) {
    throw new IdempotencyConfigurationError(
      `${owner}: outbox.sendTimeout (${resolved.sendTimeout} ms) must be at most half of outbox.claimTtl (${resolved.claimTtl} ms), or another instance could send a message while a slow send of it still runs.`,
      'Lower sendTimeout or raise claimTtl.',
    );
  }
  return resolved;
}

/**
 * Sends what executions staged on one store, in every instance of the application: claims
 * a batch of executions (a claim keeps the other instances' relays off them), sends each
 * one's messages in order through `send`, and settles them: all sent, or the position
 * reached and a back-off before the next attempt. A message is sent at least once; its id
 * is the same on every send.
 */
export class OutboxRelay {
  /** This relay's id in the store's claims. */
  readonly owner = randomUUID();
  private readonly options: Resolved;
  private timer: NodeJS.Timeout | undefined;
  private round: Promise<void> | undefined;
  private wakeRequested = false;
  private stopped = true;
  private unregister: (() => void) | undefined;
  /** When sent messages were last purged (`Date.now()`); 0: not yet. */
  private purgedAt = 0;
  /** When the backlog was last read (`Date.now()`); 0: not yet, so the first round reads it. */
  private backlogReadAt = 0;
  /** Whether the last backlog reported had something waiting (an empty one is reported once, after it). */
  private reportedWaiting = false;

  constructor(
    private readonly store: IdempotencyStore & IdempotencyOutboxStore,
    private readonly send: OutboxSend,
    options: OutboxRelayOptions = {},
    private readonly report: OutboxRelayReport = {},
  ) {
    this.options = resolveRelayOptions('OutboxRelay', options);
  }

  /** Starts the relay: a first round at once, then rounds when woken or every `pollInterval`. */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.unregister = onOutboxStaged(() => this.wake());
    this.schedule(0);
  }

  /** Runs a round as soon as the current one ends. */
  wake(): void {
    if (this.stopped) return;
    if (this.round) this.wakeRequested = true;
    else this.schedule(0);
  }

  /** Stops the relay once its current round ended (what it claimed and did not send is settled for the next relay). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearTimeout(this.timer);
    this.unregister?.();
    this.unregister = undefined;
    await this.round;
  }

  private schedule(delay: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.runRound(), delay);
    this.timer.unref();
  }

  private runRound(): void {
    if (this.stopped || this.round) return;
    this.wakeRequested = false;
    this.round = this.drain().then(
      (full) => this.afterRound(full),
      (error: unknown) => {
        this.report.storeFailed?.(error);
        this.afterRound(false);
      },
    );
  }

  private afterRound(full: boolean): void {
    this.round = undefined;
    if (this.stopped) return;
    this.schedule(full || this.wakeRequested ? 0 : this.options.pollInterval);
  }

  /** One round: claims a batch and delivers it; true when the batch was full (more may wait). */
  private async drain(): Promise<boolean> {
    await this.purgeSent();
    const claimed = await this.store.claimOutbox({ owner: this.owner, limit: this.options.batchSize, claimTtl: this.options.claimTtl });
    await Promise.all(claimed.map((entry) => this.deliver(entry)));
    await this.readBacklog();
    return claimed.length >= this.options.batchSize;
  }

  /**
   * Reports what waits, at most every `backlogInterval`. Read after the round's sends, so a
   * message this relay just sent is not counted as waiting until the next read.
   */
  private async readBacklog(): Promise<void> {
    const report = this.report.backlog;
    if (!report || this.stopped || Date.now() - this.backlogReadAt < this.options.backlogInterval) return;
    const started = (this.backlogReadAt = Date.now());
    let backlog: OutboxBacklog;
    try {
      backlog = await this.store.outboxBacklog();
    } catch (error) {
      // Not the round's failure: what it claimed was sent and settled.
      this.report.storeFailed?.(error);
      return;
    }
    // An outbox that stays empty is not news: apps that never emit get no event every interval.
    if (backlog.pending === 0 && !this.reportedWaiting) return;
    this.reportedWaiting = backlog.pending > 0;
    report(backlog, Date.now() - started);
  }

  /** Purges what was sent longer than `retention` ago, at most once a minute (a batch per round until done). */
  private async purgeSent(): Promise<void> {
    if (!this.store.purgeOutbox || Date.now() - this.purgedAt < Math.min(60_000, this.options.retention)) return;
    const limit = this.options.batchSize * 10;
    const deleted = await this.store.purgeOutbox(this.options.retention, limit);
    // A full batch: more are due; the next round purges again.
    if (deleted < limit) this.purgedAt = Date.now();
  }

  /** Sends one execution's messages in order, from where the last attempt stopped, and settles it. */
  private async deliver(entry: ClaimedOutbox): Promise<void> {
    const messages = JSON.parse(entry.messages) as OutboxMessage[];
    let next = entry.next;
    let failure: { error: unknown } | undefined;
    for (; next < messages.length && !this.stopped; next++) {
      const message = messages[next]!;
      try {
        await this.sendInTime(message);
      } catch (error) {
        failure = { error };
        break;
      }
      this.report.sent?.(message, entry.stagedAt);
    }
    const done = next >= messages.length;
    const retryAt = done ? undefined : Date.now() + (failure ? this.backoff(entry.attempts) : 0);
    try {
      await this.store.settleOutbox(entry.id, this.owner, {
        next,
        retryAt,
        error: failure ? String((failure.error as Error)?.message ?? failure.error) : undefined,
      });
    } catch (error) {
      // The claim runs out and another round sends from the last settled position (same ids).
      this.report.storeFailed?.(error);
    }
    if (failure) this.report.failed?.(messages[next]!, failure.error, retryAt!, entry.attempts + 1);
  }

  private sendInTime(message: OutboxMessage): Promise<void> {
    const timeout = this.options.sendTimeout;
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the broker did not confirm within ${timeout} ms (outbox.sendTimeout)`)), timeout);
      timer.unref();
      this.send(message).then(
        () => {
          clearTimeout(timer);
          resolve();
        },
        (error: unknown) => {
          clearTimeout(timer);
          reject(error);
        },
      );
    });
  }

  /** Exponential back-off from `retryDelay`, at most `maxRetryDelay`, with a fifth of jitter. */
  private backoff(attempts: number): number {
    const base = Math.min(this.options.maxRetryDelay, this.options.retryDelay * 2 ** Math.min(attempts, 30));
    return Math.round(base * (0.8 + Math.random() * 0.2));
  }
}
