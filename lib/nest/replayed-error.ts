import * as nestCommon from '@nestjs/common';
import { HttpException, IntrinsicException } from '@nestjs/common';
import type { ErrorClass } from '../core/cached-errors.js';
import { decodeError, type EncodedError } from '../core/outcome.js';

/*
 * A cached error (`cacheErrors`) replays on HTTP, GraphQL and RPC by being thrown again,
 * rebuilt, to the application's exception filters: the filters that turned it into the
 * first caller's answer (`@Catch(CardDeclinedError)` answering 402) turn its replay into
 * the same answer, and without a filter Nest's default handling answers as the first time.
 * A filter matches by `instanceof`, so the error is rebuilt on a real class of its chain.
 */

let nestClasses: readonly ErrorClass[] | undefined;

/**
 * Nest's own exception classes (`HttpException`, its built-in subclasses such as
 * `BadRequestException`, `IntrinsicException`), read from the exports of the
 * `@nestjs/common` the application runs, so that each Nest version's set is known.
 */
function nestExceptionClasses(): readonly ErrorClass[] {
  if (nestClasses) return nestClasses;
  const found: ErrorClass[] = [];
  for (const value of Object.values(nestCommon as Record<string, unknown>)) {
    if (typeof value !== 'function') continue;
    if (value === IntrinsicException || value === HttpException || (value as { prototype?: unknown }).prototype instanceof HttpException) {
      found.push(value as ErrorClass);
    }
  }
  return (nestClasses = found);
}

/**
 * A cached error, rebuilt to be thrown again (no constructor runs): its stored name,
 * message and own fields, on the nearest class of its chain that is
 *
 * - listed by the handler's `cacheErrors` (`[CardDeclinedError]`: a filter catching it, or
 *   a base class of it, catches the replay);
 * - else, for an error of Nest's exception family, Nest's own class of that name
 *   (`BadRequestException`, `HttpException`): a user's own class of a built-in name
 *   (outside the family) is never taken for Nest's;
 * - else a built-in class (`RangeError`), else `Error`.
 */
export function replayedError(encoded: EncodedError, listed: readonly ErrorClass[] | undefined): Error {
  const chain = encoded.chain?.length ? encoded.chain : [encoded.name];
  const nestFamily = chain.includes('HttpException') || chain.includes('IntrinsicException');
  return decodeError(encoded, nestFamily ? [...(listed ?? []), ...nestExceptionClasses()] : listed);
}

/**
 * An HTTP record written before errors were stored with their chain and fields (0.6.x:
 * `props: { body }`, the status in the record's meta): an `HttpException` answering that
 * body and status, as 0.6 replayed it, on its own class where it is known (a listed one
 * that is an `HttpException`, or Nest's of that name), so that a filter catching that
 * class catches it too. A non-HTTP error was stored as Nest's 500 answer, named
 * `InternalServerErrorException`: it replays as that.
 */
export function replayedHttpErrorOf06(encoded: EncodedError, status: number, listed: readonly ErrorClass[] | undefined): Error {
  const body = encoded.props?.body;
  const http = listed?.filter((type) => type.prototype instanceof HttpException);
  return replayedError(
    {
      name: encoded.name,
      message: encoded.message,
      chain: [encoded.name, 'HttpException'],
      fields: { response: body, status, message: encoded.message, name: encoded.name },
    },
    http,
  );
}
