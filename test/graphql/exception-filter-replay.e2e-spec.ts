import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { BadRequestException, Catch, HttpException, Module, UseFilters, type INestApplication, type Provider } from '@nestjs/common';
import { APP_FILTER, APP_INTERCEPTOR, NestFactory } from '@nestjs/core';
import { GraphQLModule, Int, Mutation, Query, Resolver, type GqlExceptionFilter } from '@nestjs/graphql';
import { GraphQLError } from 'graphql';
import { randomUUID } from 'node:crypto';
import { Idempotent, IdempotencyInterceptor, IdempotencyModule } from '../../lib/index.js';
import { Effects } from '../support/effects.js';
import { gql } from './graphql-app.js';

/*
 * A cached error (`cacheErrors`) replays through the application's GraphQL exception
 * filters as the first caller got it (issue 41, item 6): a global `GqlExceptionFilter`
 * turning a domain error into a `GraphQLError` with a code of its own, and a resolver's
 * filter catching Nest's `BadRequestException`; with the method wrapper alone and with
 * `IdempotencyInterceptor` as the outermost interceptor.
 */

class CardDeclinedError extends Error {
  constructor(readonly declineCode: string) {
    super('card declined');
  }
}

@Catch(CardDeclinedError)
class CardDeclinedFilter implements GqlExceptionFilter {
  catch(error: CardDeclinedError): GraphQLError {
    return new GraphQLError('Your card was declined.', { extensions: { code: 'CARD_DECLINED', decline: error.declineCode } });
  }
}

@Catch(BadRequestException)
class BadRequestFilter implements GqlExceptionFilter {
  catch(error: BadRequestException): GraphQLError {
    return new GraphQLError(`Invalid: ${error.message}`, { extensions: { code: 'INVALID' } });
  }
}

const effects = new Effects();

@Resolver()
class ChargesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Int)
  @Idempotent({ cacheErrors: [CardDeclinedError] })
  declined(): number {
    throw new CardDeclinedError(`insufficient_funds_${effects.hit('declined')}`);
  }

  @Mutation(() => Int)
  @UseFilters(BadRequestFilter)
  @Idempotent({ cacheErrors: (error) => error instanceof HttpException && error.getStatus() < 500 })
  invalid(): number {
    throw new BadRequestException(`amount too small (${effects.hit('invalid')})`);
  }
}

async function start(interceptor: boolean): Promise<{ app: INestApplication; url: string }> {
  const providers: Provider[] = [ChargesResolver, { provide: APP_FILTER, useClass: CardDeclinedFilter }];
  if (interceptor) providers.push({ provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor });
  @Module({
    imports: [
      IdempotencyModule.forRoot({ logger: false }),
      GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true, includeStacktraceInErrorResponses: false }),
    ],
    providers,
  })
  class AppModule {}
  const app = await NestFactory.create(AppModule, { logger: false });
  await app.listen(0, '127.0.0.1');
  return { app, url: `${(await app.getUrl()).replace('[::1]', '127.0.0.1')}/graphql` };
}

describe.each([false, true])(
  'GraphQL: a cached error replays through the exception filters (IdempotencyInterceptor: %s)',
  (interceptor) => {
    let app: INestApplication;
    let url: string;
    beforeAll(async () => {
      ({ app, url } = await start(interceptor));
    });
    afterAll(async () => {
      await app?.close();
    });

    async function firstAndReplay(field: string) {
      const key = randomUUID();
      const runs = effects.count(field);
      const first = await gql(url, `mutation { ${field} }`, { key });
      const replay = await gql(url, `mutation { ${field} }`, { key });
      expect(replay).toEqual(first);
      expect(effects.count(field) - runs).toBe(1);
      return first;
    }

    it('a domain error a global GqlExceptionFilter turns into a GraphQLError with its own code', async () => {
      const first = await firstAndReplay('declined');
      expect(first.errors).toEqual([
        expect.objectContaining({
          message: 'Your card was declined.',
          extensions: expect.objectContaining({ code: 'CARD_DECLINED', decline: expect.stringMatching(/^insufficient_funds_\d+$/) }),
        }),
      ]);
    });

    it("Nest's BadRequestException selected by a predicate, caught by the resolver's filter", async () => {
      const first = await firstAndReplay('invalid');
      expect(first.errors).toEqual([
        expect.objectContaining({
          message: expect.stringMatching(/^Invalid: amount too small/),
          extensions: expect.objectContaining({ code: 'INVALID' }),
        }),
      ]);
    });
  },
);
