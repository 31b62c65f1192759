import type { ExecutionContext } from '@nestjs/common';
import { IdempotencyErrorCode, type IdempotencyError } from '../core/index.js';
import { MethodAdapter } from './method.adapter.js';
import type { ResolvedHandlerConfig } from './transport.adapter.js';

/** The members of a BullMQ `Job` this adapter reads (bullmq itself is never imported). */
/**
 * Refusals that the same job meets again on every attempt (another payload under its
 * key, no usable key, a result that cannot be replayed): retrying cannot help.
 */
const PERMANENT = new Set<string>([
  IdempotencyErrorCode.FingerprintMismatch,
  IdempotencyErrorCode.KeyMissing,
  IdempotencyErrorCode.KeyInvalid,
  IdempotencyErrorCode.RequestInvalid,
  IdempotencyErrorCode.NotReplayable,
]);

interface JobLike {
  id?: string;
  name?: string;
  data?: unknown;
}

/**
 * `process(job)` of an @nestjs/bullmq `WorkerHost`. The key is the job id (producers
 * may set `jobId` to a business key), or the `key` option over `(job, token)`; the
 * fingerprint is the job's name and data. The job's return value is stored, so a
 * stalled or retried job whose earlier attempt completed gets it without running again.
 * A thrown error releases the key and reaches BullMQ, whose own retry (`attempts`,
 * `backoff`) runs the job again; an attempt that meets a running one waits for it
 * (`inFlight: 'wait'`, the default) or throws `IdempotencyInFlightError`, a failed
 * attempt BullMQ retries. A refusal that every attempt would meet again (another
 * payload under the job's key, no key) fails the job at once, as BullMQ's
 * `UnrecoverableError` does, instead of using up its attempts.
 */
export class BullMqAdapter extends MethodAdapter {
  override readKey(context: ExecutionContext): unknown {
    return context.getArgByIndex<JobLike | undefined>(0)?.id;
  }

  override describeKeySource(config: ResolvedHandlerConfig): string {
    return config.options.key ? `the key option of ${config.handlerName} (it returned nothing for this job)` : 'the job id (job.id)';
  }

  override fingerprintMaterial(context: ExecutionContext): unknown {
    const job = context.getArgByIndex<JobLike | undefined>(0);
    return { name: job?.name ?? null, data: job?.data ?? null };
  }

  /**
   * BullMQ fails a job without retrying it when the error is named `UnrecoverableError`
   * (bullmq is not imported: the name is what it checks, besides its class). The
   * library's error stays reachable as `cause`, its code as `code`.
   */
  override toTransportError(_context: ExecutionContext, error: IdempotencyError): unknown {
    if (!PERMANENT.has(error.code)) return error;
    const permanent = new Error(`${error.code}: ${error.message}`, { cause: error });
    permanent.name = 'UnrecoverableError';
    return Object.assign(permanent, { code: error.code });
  }
}
