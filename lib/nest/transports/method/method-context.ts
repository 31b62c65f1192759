import type { ExecutionContext, Type } from '@nestjs/common';

/**
 * The ExecutionContext of an `@Idempotent()` method called without a request: a provider
 * method called by your code, a BullMQ job, an event, a schedule's tick. Its type is
 * `'method'`, its arguments are the call's, and it carries the operation that scopes
 * its keys. Hooks of a custom `IdempotencyRuntime` receive it like any other context:
 * check `context.getType()` before reading an HTTP request from it.
 */
export class MethodExecutionContext implements ExecutionContext {
  constructor(
    private readonly args: unknown[],
    private readonly owner: Type<unknown>,
    private readonly handler: Function,
    /** @internal the operation part of the scope (`method RefundService.refund`, `bullmq refunds`) */
    readonly operation: string,
  ) {}

  getType<TContext extends string = string>(): TContext {
    return 'method' as TContext;
  }
  getClass<T = unknown>(): Type<T> {
    return this.owner as Type<T>;
  }
  getHandler(): Function {
    return this.handler;
  }
  getArgs<T extends unknown[] = unknown[]>(): T {
    return this.args as T;
  }
  getArgByIndex<T = unknown>(index: number): T {
    return this.args[index] as T;
  }
  switchToRpc(): ReturnType<ExecutionContext['switchToRpc']> {
    return { getData: <T>() => this.args[0] as T, getContext: <T>() => this.args[1] as T };
  }
  switchToHttp(): ReturnType<ExecutionContext['switchToHttp']> {
    return {
      getRequest: <T>() => this.args[0] as T,
      getResponse: <T>() => this.args[1] as T,
      getNext: <T>() => this.args[2] as T,
    };
  }
  switchToWs(): ReturnType<ExecutionContext['switchToWs']> {
    return {
      getClient: <T>() => this.args[0] as T,
      getData: <T>() => this.args[1] as T,
      getPattern: () => '',
    };
  }
}
