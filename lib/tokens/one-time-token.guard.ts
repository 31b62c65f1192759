import { Inject, Injectable, SetMetadata, UseGuards, applyDecorators, type CanActivate, type ExecutionContext } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import {
  IdempotencyConfigurationError,
  IdempotencyStoreUnavailableError,
  isIdempotencyError,
  type IdempotencyError,
} from '../core/errors.js';
import { toProblemHttpException, type HttpResponseLike } from '../nest/problem.js';
import { OneTimeTokenMissingError } from './one-time-token.errors.js';
import { DEFAULT_ONE_TIME_TOKEN_SCOPE, OneTimeTokenService } from './one-time-token.service.js';

/** Options of `@RequireOneTimeToken()`. */
export interface RequireOneTimeTokenOptions {
  /** Request header carrying the token. @default 'One-Time-Token' */
  header?: string;
  /**
   * Body field carrying the token, read when the header is absent: for HTML forms,
   * which send it as a hidden input.
   * @default none (header only)
   */
  bodyField?: string;
  /**
   * The scope the token was issued for: a fixed string, or a function of the request
   * (e.g. `(ctx) => 'checkout:' + ctx.switchToHttp().getRequest().user.id`), so that
   * a token issued to one user or form is unknown everywhere else.
   * @default 'default' (the default scope of OneTimeTokenService.issue)
   */
  scope?: string | ((context: ExecutionContext) => string | Promise<string>);
}

export const ONE_TIME_TOKEN_METADATA = 'nestjs-idempotency:one-time-token';
export const DEFAULT_ONE_TIME_TOKEN_HEADER = 'One-Time-Token';

/**
 * The route accepts each one-time token once: the request must carry a token issued by
 * `OneTimeTokenService.issue()` for the same scope, and the guard consumes it before
 * the handler runs. Missing token: 400 `IDEMPOTENCY_TOKEN_MISSING`; reused: 409
 * `IDEMPOTENCY_TOKEN_USED`; unknown or expired: 422 `IDEMPOTENCY_TOKEN_INVALID`, all as
 * `application/problem+json`. Needs `OneTimeTokenModule.forRoot()`.
 *
 * @example
 * @Post('checkout')
 * @RequireOneTimeToken({ scope: (ctx) => 'checkout:' + ctx.switchToHttp().getRequest().user.id })
 * checkout(@Body() order: OrderDto) { ... }
 */
export function RequireOneTimeToken(options: RequireOneTimeTokenOptions = {}): MethodDecorator & ClassDecorator {
  return applyDecorators(SetMetadata(ONE_TIME_TOKEN_METADATA, options), UseGuards(OneTimeTokenGuard));
}

interface HttpRequestLike {
  headers: Record<string, string | string[] | undefined>;
  body?: unknown;
}

/** Consumes the one-time token of a request. Applied by `@RequireOneTimeToken()`. */
@Injectable()
export class OneTimeTokenGuard implements CanActivate {
  constructor(
    @Inject(Reflector) private readonly reflector: Reflector,
    @Inject(OneTimeTokenService) private readonly tokens: OneTimeTokenService,
  ) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    if (context.getType() !== 'http') {
      throw new IdempotencyConfigurationError(
        `@RequireOneTimeToken() applies to HTTP routes only, not to ${context.getType()} handlers.`,
        'For messages, use @Idempotent() with the message id as key instead.',
      );
    }
    const options =
      this.reflector.getAllAndOverride<RequireOneTimeTokenOptions | undefined>(ONE_TIME_TOKEN_METADATA, [
        context.getHandler(),
        context.getClass(),
      ]) ?? {};
    const http = context.switchToHttp();
    const request = http.getRequest<HttpRequestLike>();
    const refuse = (error: IdempotencyError): never => {
      throw toProblemHttpException(http.getResponse<HttpResponseLike>(), error);
    };
    const token = tokenOf(request, options);
    if (token === undefined) refuse(new OneTimeTokenMissingError(sourceOf(options)));
    const scope = typeof options.scope === 'function' ? await options.scope(context) : (options.scope ?? DEFAULT_ONE_TIME_TOKEN_SCOPE);
    if (typeof scope !== 'string') {
      refuse(
        new IdempotencyConfigurationError(
          `The scope function of @RequireOneTimeToken() returned ${typeof scope}, not a string.`,
          'Return the same string that was passed to OneTimeTokenService.issue(), e.g. `checkout:${user.id}`.',
        ),
      );
    }
    try {
      await this.tokens.consumeOrThrow(scope, token);
    } catch (error) {
      // Fail closed like @Idempotent(): an unreachable store is a 503, never a pass.
      refuse(isIdempotencyError(error) ? error : new IdempotencyStoreUnavailableError(error));
    }
    return true;
  }
}

function tokenOf(request: HttpRequestLike, options: RequireOneTimeTokenOptions): string | undefined {
  const header = request.headers[(options.header ?? DEFAULT_ONE_TIME_TOKEN_HEADER).toLowerCase()];
  const fromHeader = Array.isArray(header) ? header[0] : header;
  if (fromHeader !== undefined && fromHeader !== '') return fromHeader;
  if (options.bodyField && request.body && typeof request.body === 'object') {
    const value = (request.body as Record<string, unknown>)[options.bodyField];
    if (typeof value === 'string' && value !== '') return value;
  }
  return undefined;
}

function sourceOf(options: RequireOneTimeTokenOptions): string {
  const header = `the ${options.header ?? DEFAULT_ONE_TIME_TOKEN_HEADER} header`;
  return options.bodyField ? `${header} or the body field "${options.bodyField}"` : header;
}
