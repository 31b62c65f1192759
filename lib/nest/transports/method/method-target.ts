// The integrations are optional peers: their metadata keys (stable across their majors)
// are written out rather than imported, so an application that uses none of them loads none.
/** `@Processor()` of @nestjs/bullmq, on the class. */
const BULLMQ_PROCESSOR_METADATA = 'bullmq:processor_metadata';
/** `@OnEvent()` of @nestjs/event-emitter, on the method: `[{ event, options }]`. */
const EVENT_LISTENER_METADATA = 'EVENT_LISTENER_METADATA';
/** @nestjs/schedule, on the method. */
const SCHEDULER_TYPE = 'SCHEDULER_TYPE';
const SCHEDULER_NAME = 'SCHEDULER_NAME';
const SCHEDULE_CRON_OPTIONS = 'SCHEDULE_CRON_OPTIONS';
const SCHEDULE_INTERVAL_OPTIONS = 'SCHEDULE_INTERVAL_OPTIONS';
/** @nestjs/schedule's SchedulerType enum, by value. */
const CRON = 1;
const INTERVAL = 3;

/**
 * What an `@Idempotent()` method that runs without a request is:
 * - `method`: a provider method (your own code calls it, or `@OnEvent()`, `@Timeout()`);
 *   its key is the `key` option over the call's arguments.
 * - `bullmq`: `process(job)` of an @nestjs/bullmq `WorkerHost`; the key defaults to the job id.
 * - `cron` / `interval`: an @nestjs/schedule job; the key defaults to the tick.
 */
export type MethodKind = 'method' | 'bullmq' | 'cron' | 'interval';

/** A method decorated with `@Idempotent()` outside a request, as read from its metadata once. */
export interface MethodTarget {
  readonly kind: MethodKind;
  /** `Class.method`. */
  readonly handlerName: string;
  /** The operation part of the scope: `method RefundService.refund`, `bullmq refunds`, `cron nightly-settlement`. */
  readonly operation: string;
  /** `@OnEvent()` listener: the event names it listens to. */
  readonly events?: readonly string[];
  /** `cron`: the schedule as declared (`'0 * * * *'`, a Date), with its time zone. */
  readonly cron?: { readonly cronTime: unknown; readonly timeZone?: string; readonly utcOffset?: string | number };
  /** `interval`: its period, ms. */
  readonly every?: number;
  /**
   * The default operation is made of the class and method names (a provider method, a
   * schedule without a name): two classes of one name would share it, so the explorer
   * refuses such a pair at boot unless both name their `scope`.
   */
  readonly namedByClass: boolean;
}

const targets = new WeakMap<Function, WeakMap<Function, MethodTarget>>();

/**
 * The class each decorated method was last seen on by a boot check, to name it when it is
 * called without its instance (a detached method has no `this` to read the class from).
 * Only for messages: the same in every application that uses the class.
 */
const ownerNames = new WeakMap<Function, string>();

/** What the method is (provider method, BullMQ processor, schedule), read once per method and class. */
export function targetOf(handler: Function, owner: Function, propertyName: string): MethodTarget {
  ownerNames.set(handler, owner.name);
  let byOwner = targets.get(handler);
  if (!byOwner) targets.set(handler, (byOwner = new WeakMap()));
  let target = byOwner.get(owner);
  if (!target) byOwner.set(owner, (target = methodTargetOf(handler, owner, propertyName)));
  return target;
}

/** The class a boot check last saw the method on (see `ownerNames`). */
export function ownerNameOf(handler: Function): string | undefined {
  return ownerNames.get(handler);
}

/** What the method is, from the metadata on it and its class. */
function methodTargetOf(method: Function, owner: Function, propertyName: string): MethodTarget {
  const handlerName = `${owner.name}.${propertyName}`;
  const processor = Reflect.getMetadata(BULLMQ_PROCESSOR_METADATA, owner) as { name?: string } | undefined;
  if (processor && propertyName === 'process') {
    return { kind: 'bullmq', handlerName, operation: `bullmq ${processor.name ?? 'default'}`, namedByClass: false };
  }
  const schedulerType = Reflect.getMetadata(SCHEDULER_TYPE, method) as number | undefined;
  const declaredName = Reflect.getMetadata(SCHEDULER_NAME, method) as string | undefined;
  const scheduleName = declaredName ?? handlerName;
  const namedByClass = declaredName === undefined;
  if (schedulerType === CRON) {
    const options = (Reflect.getMetadata(SCHEDULE_CRON_OPTIONS, method) ?? {}) as {
      cronTime?: unknown;
      timeZone?: string;
      utcOffset?: string | number;
    };
    return {
      kind: 'cron',
      handlerName,
      operation: `cron ${scheduleName}`,
      namedByClass,
      cron: { cronTime: options.cronTime, timeZone: options.timeZone, utcOffset: options.utcOffset },
    };
  }
  if (schedulerType === INTERVAL) {
    const options = (Reflect.getMetadata(SCHEDULE_INTERVAL_OPTIONS, method) ?? {}) as { timeout?: number };
    return { kind: 'interval', handlerName, operation: `interval ${scheduleName}`, every: options.timeout, namedByClass };
  }
  const listeners = Reflect.getMetadata(EVENT_LISTENER_METADATA, method) as Array<{ event?: unknown }> | undefined;
  const events = listeners?.map((listener) => eventName(listener.event));
  return { kind: 'method', handlerName, operation: `method ${handlerName}`, events, namedByClass: true };
}

function eventName(event: unknown): string {
  if (Array.isArray(event)) return event.map(String).join('.');
  return typeof event === 'symbol' ? (event.description ?? 'symbol') : String(event);
}
