import type { ExecutionContext } from '@nestjs/common';
import type { ExecutionRequest } from '../core/execution.js';
import {
  IdempotencyConfigurationError,
  IdempotencyStoreUnavailableError,
  isIdempotencyError,
  type IdempotencyError,
} from '../core/errors.js';
import { deserializeOutcome, serializeOutcome, type StoredOutcome } from '../core/outcome.js';
import { isTransactionalStore } from '../core/store.js';
import type { AnswerFrame, PendingAnswer } from './answer-frame.js';
import type { HandlerCall } from './handler-call.js';
import { NO_REPLY, type ResolvedHandlerConfig } from './transport.adapter.js';

/** The steps of the protocol a transactional run shares with the others (see `IdempotencyRuntime`). */
export interface ProtocolSteps {
  /** The handler threw: marks the call failed and returns what the caller gets instead. */
  handlerFailed(context: ExecutionContext, config: ResolvedHandlerConfig, call: HandlerCall, error: unknown): Promise<unknown> | unknown;
  /** One of this library's errors in the transport's form, reported when it is a configuration error. */
  transportErrorOf(context: ExecutionContext, config: ResolvedHandlerConfig, error: IdempotencyError): unknown;
  /** A stored outcome as the transport replays it (to the frame, when there is one). */
  replay(context: ExecutionContext, config: ResolvedHandlerConfig, outcome: StoredOutcome, frame: AnswerFrame | undefined): unknown;
}

/**
 * `@Idempotent({ transactional: true })`: runs the handler in one transaction with its
 * record. Under a frame the transaction stays open until the outermost layer has the
 * chain's answer: the record holds that answer, and an error the chain ends in after the
 * handler rolls both back.
 */
export async function runTransactional(
  steps: ProtocolSteps,
  context: ExecutionContext,
  config: ResolvedHandlerConfig,
  request: ExecutionRequest,
  call: HandlerCall,
  frame: AnswerFrame | undefined,
): Promise<unknown> {
  const adapter = config.adapter;
  const store = config.policy.store;
  if (!isTransactionalStore(store)) {
    throw new IdempotencyConfigurationError(
      `${config.handlerName} uses @Idempotent({ transactional: true }) but its store has no transactions.`,
      'Use a store with transactions as the store of this handler or of the module: TypeOrmIdempotencyStore (nestjs-idempotency/typeorm), PrismaIdempotencyStore (nestjs-idempotency/prisma) or DrizzleIdempotencyStore (nestjs-idempotency/drizzle).',
    );
  }
  let handlerError: { error: unknown } | undefined;
  const handedOver = frame ? new Deferred<{ value: unknown }>() : undefined;
  const outer = frame ? new Deferred<{ answer: unknown } | { failure: unknown }>() : undefined;
  const transaction = store.runTransactional({ key: request.key, fingerprint: request.fingerprint, ttl: config.policy.ttl }, async () => {
    // The handler runs inside the transaction's async context, so it can reach the EntityManager.
    let value: unknown;
    try {
      value = await call.run();
    } catch (error) {
      handlerError = { error };
      throw error;
    }
    let answer = value;
    if (handedOver && outer) {
      handedOver.resolve({ value });
      const settled = await outer.promise;
      if ('failure' in settled) throw settled.failure;
      answer = settled.answer;
    }
    return { value, result: serializeOutcome(adapter.captureValue(context, answer === NO_REPLY ? undefined : answer, config)) };
  });
  const failed = async (error: unknown): Promise<never> => {
    if (handlerError?.error === error) {
      // Rolled back with the handler's work: nothing is stored, whatever cacheErrors says.
      const answer = await steps.handlerFailed(context, config, call, error);
      await adapter.settle?.(context, config, 'failed', error);
      throw answer;
    }
    if (isIdempotencyError(error)) throw error;
    // The transaction itself failed (connection lost, record statement or commit
    // refused), so nothing committed and the client may retry (503).
    throw new IdempotencyStoreUnavailableError(error);
  };
  let outcome;
  try {
    if (frame && handedOver && outer) {
      const first = await Promise.race([handedOver.promise, transaction.then((done) => ({ done }))]);
      if ('value' in first) {
        transaction.catch(() => undefined); // awaited by the frame's settlement below
        const pending: PendingAnswer = {
          value: async (answer) => {
            outer.resolve({ answer });
            try {
              await transaction;
            } catch (error) {
              throw steps.transportErrorOf(context, config, new IdempotencyStoreUnavailableError(error));
            }
            if (adapter.settle) await adapter.settle(context, config, 'stored');
          },
          error: async (failure) => {
            outer.resolve({ failure });
            await transaction.catch(() => undefined);
            await adapter.settle?.(context, config, 'failed', failure);
          },
          cancel: () => outer.resolve({ failure: new Error('the caller went away before the answer') }),
        };
        frame.settleWith(pending);
        if (frame.cancelled) pending.cancel();
        return first.value;
      }
      outcome = first.done;
    } else {
      outcome = await transaction;
    }
  } catch (error) {
    return failed(error);
  }
  if (outcome.kind === 'executed') {
    if (adapter.settle) await adapter.settle(context, config, 'stored');
    return outcome.value;
  }
  if (adapter.settle) await adapter.settle(context, config, 'replayed');
  return steps.replay(context, config, deserializeOutcome(outcome.result), frame);
}

/** A promise with its resolver at hand. */
class Deferred<T> {
  resolve!: (value: T) => void;
  readonly promise = new Promise<T>((resolve) => (this.resolve = resolve));
}
