import type { ExecutionContext } from '@nestjs/common';
import { IdempotencyErrorCode, type IdempotencyError } from '../../../core/index.js';
import { MethodAdapter } from '../method/method.adapter.js';
import type { MethodKind } from '../method/method-target.js';

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

/** The members of a BullMQ `Job` this adapter reads (bullmq itself is never imported). */
interface JobLike {
  id?: string;
  name?: string;
  data?: unknown;
  /** When the job was added (epoch ms): set once by BullMQ, kept by every retry, stall and `job.retry()`. */
  timestamp?: number | string;
}

/**
 * BullMQ's own job ids are a per-queue counter (`INCR`), written as digits only; BullMQ
 * refuses such custom ids ("Custom Id cannot be integers"), so an id of digits is always
 * the counter's.
 */
const COUNTER_ID = /^[0-9]+$/;

/**
 * The default key of a job. A custom `jobId` is the producer's business key and is the
 * key as it is: a job added again under it after the first one was removed is the same
 * work. A counter id is not: the counter restarts (`obliterate()`, a flushed or new
 * BullMQ Redis), and job `7` of today is not job `7` of yesterday, so the key adds the
 * time the job was added: `7:1764625404000`. The `:` keeps these keys apart from every
 * custom id (BullMQ refuses `:` in them). Undefined when the job has no id, or a counter
 * id without its timestamp (never a key that could name another job).
 */
export function defaultJobKey(job: JobLike | undefined): string | undefined {
  const id = job?.id === undefined || job.id === null ? undefined : String(job.id);
  if (id === undefined || id === '') return undefined;
  if (!COUNTER_ID.test(id)) return id;
  // A number in BullMQ 6; read from Redis as it is stored (digits), should a version hand the raw field over.
  const timestamp = typeof job?.timestamp === 'string' && COUNTER_ID.test(job.timestamp) ? Number(job.timestamp) : job?.timestamp;
  return typeof timestamp === 'number' && Number.isSafeInteger(timestamp) && timestamp > 0 ? `${id}:${timestamp}` : undefined;
}

/**
 * `process(job)` of an @nestjs/bullmq `WorkerHost`. The key is the producer's `jobId`
 * (a business key), else BullMQ's own id with the time the job was added (see
 * `defaultJobKey`), or the `key` option over `(job, token)`; the fingerprint is the
 * job's name and data. The job's return value is stored, so a
 * stalled or retried job whose earlier attempt completed gets it without running again.
 * A thrown error releases the key and reaches BullMQ, whose own retry (`attempts`,
 * `backoff`) runs the job again; an attempt that meets a running one waits for it
 * (`inFlight: 'wait'`, the default) or throws `IdempotencyInFlightError`, a failed
 * attempt BullMQ retries. A refusal that every attempt would meet again (another
 * payload under the job's key, no key) fails the job at once, as BullMQ's
 * `UnrecoverableError` does, instead of using up its attempts.
 */
export class BullMqAdapter extends MethodAdapter {
  override readonly name: string = 'bullmq';
  override readonly kinds: readonly MethodKind[] = ['bullmq'];
  protected override readonly defaultKeySource = 'the job id (job.id, with job.timestamp when BullMQ generated the id)';
  protected override readonly keyCall = ' for this job';

  override readKey(context: ExecutionContext): unknown {
    return defaultJobKey(context.getArgByIndex<JobLike | undefined>(0));
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
