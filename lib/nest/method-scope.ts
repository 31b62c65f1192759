import { IdempotencyConfigurationError } from '../core/index.js';

/** One `@Idempotent()` method without a request, as one provider serves it, for the boot check of scopes. */
export interface ScopedMethod {
  /** The operation part of its scope: the `scope` option, else the default. */
  readonly operation: string;
  /** True when `scope` was given: the user chose the name, and sharing it is on purpose. */
  readonly explicit: boolean;
  /** True when the default operation is built from the class name (see `MethodTarget.namedByClass`). */
  readonly namedByClass: boolean;
  /** The method's code: the decorated function, and the class it is read from. */
  readonly handler: Function;
  readonly owner: Function;
  /** `RefundService.refund`. */
  readonly handlerName: string;
  /**
   * What serves it: the instance of a singleton, the provider of a transient or
   * request-scoped one. One provider exported to and imported by many modules is one
   * instance, so it is one entry however many modules see it.
   */
  readonly provider: object;
  /** `RefundService in ShopModule`. */
  readonly providerName: string;
}

/**
 * The operations of one application's `@Idempotent()` methods, collected by the explorer
 * at boot (one per application and IdempotencyModule: never shared between two
 * applications in one process). Two methods whose keys would meet under one operation
 * because their classes share a name (two feature modules, a minifier's short names)
 * or because one class is provided twice are refused, unless every one of them names
 * its `scope`: the library cannot tell whether sharing is meant, so it does not guess.
 */
export class MethodScopes {
  private readonly byOperation = new Map<string, ScopedMethod[]>();

  add(method: ScopedMethod): void {
    let methods = this.byOperation.get(method.operation);
    if (!methods) this.byOperation.set(method.operation, (methods = []));
    const known = methods.some(
      (other) => other.provider === method.provider && other.handler === method.handler && other.owner === method.owner,
    );
    if (!known) methods.push(method);
  }

  /** Throws an `IdempotencyConfigurationError` naming the first pair that would share keys without saying so. */
  check(): void {
    for (const [operation, methods] of this.byOperation) {
      if (methods.length < 2) continue;
      const byDefault = methods.filter((method) => !method.explicit);
      if (byDefault.length === 0) continue;
      const first = byDefault[0];
      const second = methods.find((method) => method !== first)!;
      throw collision(operation, first, second);
    }
  }
}

function collision(operation: string, first: ScopedMethod, second: ScopedMethod): IdempotencyConfigurationError {
  const pair = `${first.handlerName} (${first.providerName}) and ${second.handlerName} (${second.providerName})`;
  const consequence = `would share one key space, '${operation}': a key used by one would return the other's stored result without running it`;
  if (first.handler === second.handler && first.owner === second.owner) {
    return new IdempotencyConfigurationError(
      `@Idempotent() on ${pair} ${consequence}. They are one class provided twice, so two instances (perhaps configured differently) run under one default scope.`,
      `If both instances do the same work, provide ${first.owner.name} once and export it from its module (one instance for every importer), or set one scope on ${first.handlerName}, e.g. scope: '${suggestion(first)}', to say that they share keys. ` +
        'If the instances differ (configured per module), set scope and put what differs into the key.',
    );
  }
  const why = second.explicit
    ? `${second.handlerName} names '${operation}' as its scope, which is the default scope of ${first.handlerName}`
    : first.namedByClass
      ? `Their classes are both named ${first.owner.name} (two feature modules, or a minifier's short names), and the default scope is made of class and method names`
      : operation.startsWith('bullmq ')
        ? `Both process a BullMQ queue named '${operation.slice('bullmq '.length)}' (one queue, or two queues of that name on two connections, whose job ids are not unique across them)`
        : 'Both have this default scope';
  return new IdempotencyConfigurationError(
    `@Idempotent() on ${pair} ${consequence}. ${why}.`,
    `Give each its own scope: @Idempotent({ key: ..., scope: '${suggestion(first)}' }) on ${first.handlerName} of ${first.providerName}, and another, e.g. '${suggestion(second)}', on the other. ` +
      `Records stored before under '${operation}' stay readable by the one of them you give scope: '${operation}' (they may hold either method's results).`,
  );
}

/** A readable scope to suggest: `shop.refund` for `RefundService.refund` in `ShopModule`. */
function suggestion(method: ScopedMethod): string {
  const module = / in (\S+)$/.exec(method.providerName)?.[1]?.replace(/Module$/, '');
  const name = method.handlerName.slice(method.handlerName.lastIndexOf('.') + 1);
  const words = (part: string) => part.replace(/([a-z0-9])([A-Z])/g, '$1-$2').toLowerCase();
  return module ? `${words(module)}.${words(name)}` : words(method.handlerName);
}
