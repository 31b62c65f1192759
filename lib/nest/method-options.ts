import type { IdempotentOptions } from './idempotency.options.js';

/**
 * Options of `@Idempotent()` on a method that runs without a request: a provider method
 * your code calls, an `@OnEvent()` listener, `process(job)` of a BullMQ processor, a
 * `@Cron()` / `@Interval()` job. `key` and `fingerprint` receive the method's own
 * arguments (typed by `Args`, checked against the method it decorates), and `scope`
 * names the operation. The options of HTTP routes (`header`, `replayHeaders`) and of
 * RabbitMQ (`ack`, `maxDeliveries`) do not apply and are refused at boot.
 *
 * A WebSocket gateway handler (`@SubscribeMessage()`) takes the same `key` and
 * `fingerprint`, over the message's data and the client: `key: (data: PlaceOrder, client)
 * => data.requestId` (checked against the handler's first parameters when it declares
 * them in that order, `@MessageBody()` then `@ConnectedSocket()`); `scope` is refused there.
 *
 * @example
 * @Idempotent({ key: (refund: RefundRequest) => refund.id })
 * async refund(refund: RefundRequest) { ... }
 */
// eslint-disable-next-line @typescript-eslint/no-explicit-any -- any arguments when Args is not given
export interface IdempotentMethodOptions<Args extends unknown[] = any[]> extends Omit<
  IdempotentOptions,
  'key' | 'scope' | 'fingerprint' | 'header' | 'replayHeaders' | 'ack' | 'maxDeliveries'
> {
  /**
   * Derives the key from the call's arguments. Required on a provider method and an
   * `@OnEvent()` listener (refused at boot without it).
   * @default BullMQ: the job id; `@Cron()`: its scheduled fire time; `@Interval()`: the epoch-aligned period of the tick
   */
  key?: (...args: Args) => string | number | undefined | null | Promise<string | number | undefined | null>;
  /**
   * The operation part of the scope: keys of two operations never meet. The default is
   * made of the class and method names, so a rename (or a minifier that renames classes)
   * starts a new key space: set a name of your own to keep keys through renames and
   * builds, or to share keys between two methods (give both the same scope). Two methods
   * that would share a default scope (two classes of one name, one class provided twice)
   * are refused at boot until both set one.
   * @default `method RefundService.refund`; BullMQ `bullmq <queue name>`; `cron <job name>`, `interval <job name>` (the name given to the decorator, else `Class.method`)
   */
  scope?: string;
  /**
   * What must match when a key is reused (same key, other material: `IdempotencyFingerprintMismatchError`),
   * or false to turn the check off.
   * @default the arguments; BullMQ: the job's name and data; schedules: none
   */
  fingerprint?: false | ((...args: Args) => unknown);
}
