import {
  Catch,
  Controller,
  Module,
  UseFilters,
  type ArgumentsHost,
  type ExecutionContext,
  type INestMicroservice,
  type RpcExceptionFilter,
} from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { BaseRpcExceptionFilter, MessagePattern, Payload, RpcException, type ClientProxy } from '@nestjs/microservices';
import { randomUUID } from 'node:crypto';
import { firstValueFrom, throwError, type Observable } from 'rxjs';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from '../../lib/index.js';
import { Effects, startTcpMicroservice } from './support.js';

/*
 * A cached error (`cacheErrors`) replays through the application's RPC exception filters
 * as the client got it the first time (issue 41, item 6): a global filter answering a
 * domain error with a payload of its own, a handler's filter catching an `RpcException`
 * subclass, and a catch-all `BaseRpcExceptionFilter` subclass; over TCP.
 */

class CardDeclinedError extends Error {
  constructor(readonly declineCode: string) {
    super('card declined');
  }
}

class QuotaError extends Error {
  readonly limit = 3;
}

class LimitExceeded extends RpcException {
  constructor(run: number) {
    super({ reason: 'limit exceeded', run });
  }
}

@Catch(CardDeclinedError)
class CardDeclinedFilter implements RpcExceptionFilter<CardDeclinedError> {
  catch(error: CardDeclinedError): Observable<never> {
    return throwError(() => ({ code: 'card_declined', decline: error.declineCode }));
  }
}

@Catch(LimitExceeded)
class LimitFilter implements RpcExceptionFilter<LimitExceeded> {
  catch(error: LimitExceeded): Observable<never> {
    return throwError(() => ({ code: 'limit', ...(error.getError() as object) }));
  }
}

@Catch()
class EverythingFilter extends BaseRpcExceptionFilter {
  override catch(error: unknown, host: ArgumentsHost): Observable<unknown> {
    if (error instanceof QuotaError) return throwError(() => ({ code: 'quota', limit: error.limit, message: error.message }));
    return super.catch(error, host);
  }
}

const effects = new Effects();
const keyOf = (context: ExecutionContext) => context.switchToRpc().getData<{ requestId: string }>().requestId;

@Controller()
class ChargesController {
  @MessagePattern('charge.declined')
  @Idempotent({ key: keyOf, cacheErrors: [CardDeclinedError] })
  declined(@Payload() _data: unknown) {
    throw new CardDeclinedError(`insufficient_funds_${effects.hit('declined')}`);
  }

  @MessagePattern('charge.limit')
  @UseFilters(LimitFilter)
  @Idempotent({ key: keyOf, cacheErrors: [LimitExceeded] })
  limit(@Payload() _data: unknown) {
    throw new LimitExceeded(effects.hit('limit'));
  }

  @MessagePattern('charge.quota')
  @UseFilters(EverythingFilter)
  @Idempotent({ key: keyOf, cacheErrors: [QuotaError] })
  quota(@Payload() _data: unknown) {
    throw new QuotaError(`quota exceeded ${effects.hit('quota')}`);
  }
}

describe('RPC (TCP): a cached error replays through the exception filters', () => {
  let app: INestMicroservice | undefined;
  let client: ClientProxy | undefined;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), logger: false })],
      controllers: [ChargesController],
      providers: [{ provide: APP_FILTER, useClass: CardDeclinedFilter }],
    })
    class TcpModule {}
    ({ app, client } = await startTcpMicroservice(TcpModule));
  });
  afterAll(async () => {
    await client?.close();
    await app?.close();
  });

  async function firstAndReplay(pattern: string, effect: string): Promise<unknown> {
    const data = { requestId: randomUUID() };
    const runs = effects.count(effect);
    const errorOf = () =>
      firstValueFrom(client!.send(pattern, data)).then(
        () => undefined,
        (error: unknown) => error,
      );
    const first = await errorOf();
    const replay = await errorOf();
    expect(replay).toEqual(first);
    expect(effects.count(effect) - runs).toBe(1);
    return first;
  }

  it('a domain error a global RPC filter answers with its own payload', async () => {
    expect(await firstAndReplay('charge.declined', 'declined')).toEqual({
      code: 'card_declined',
      decline: expect.stringMatching(/^insufficient_funds_\d+$/),
    });
  });

  it("an RpcException subclass listed in cacheErrors, caught by the handler's filter (@UseFilters)", async () => {
    expect(await firstAndReplay('charge.limit', 'limit')).toEqual({ code: 'limit', reason: 'limit exceeded', run: expect.any(Number) });
  });

  it('a catch-all BaseRpcExceptionFilter subclass answering a listed domain error with its fields', async () => {
    expect(await firstAndReplay('charge.quota', 'quota')).toEqual({
      code: 'quota',
      limit: 3,
      message: expect.stringMatching(/^quota exceeded \d+$/),
    });
  });
});
