import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Args, GraphQLModule, Int, Mutation, Query, Resolver } from '@nestjs/graphql';
import request from 'supertest';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from '../../../../lib/index.js';

/**
 * A shape found by attack (two operations never share a record): the GraphQL operation is
 * `graphql Mutation.charge @charge`, the field and its response path, so that one
 * Idempotency-Key can cover an HTTP request carrying several mutations. An Apollo
 * batched request (`allowBatchedHttpRequests: true`, what apollo-link-batch-http sends)
 * carries several GraphQL operations in one HTTP request, each with its own response
 * tree: two operations `mutation { charge(amount: 5) }` have the same path `charge`, so
 * the second operation of the batch is answered with the first one's stored result and
 * never runs. (Two operations in one document would be `a: charge` / `b: charge` and
 * apart; two documents of one batch cannot be told apart.) So a batch that carries one
 * key is refused, each operation with IDEMPOTENCY_KEY_INVALID, and none runs; a batch
 * without a key runs each operation unprotected as before.
 */
let runs = 0;

@Resolver()
class ChargeResolver {
  @Query(() => String)
  health() {
    return 'ok';
  }

  @Mutation(() => String)
  @Idempotent()
  charge(@Args('amount', { type: () => Int }) amount: number): string {
    return `charge-${++runs}-${amount}`;
  }
}

@Module({
  imports: [
    IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      allowBatchedHttpRequests: true,
      context: ({ req }: { req: unknown }) => ({ req }),
    }),
  ],
  providers: [ChargeResolver],
})
class AppModule {}

describe('shape: an Apollo batched request with one key', () => {
  let app: INestApplication;
  beforeAll(async () => {
    app = await NestFactory.create(AppModule, { logger: false });
    await app.init();
  });
  afterAll(async () => {
    await app?.close();
  });

  const batch = (key?: string) => {
    const op = { query: 'mutation { charge(amount: 5) }' };
    let call = request(app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Apollo-Require-Preflight', 'true');
    if (key) call = call.set('Idempotency-Key', key);
    return call.send([op, op]);
  };

  it('one key for two operations of a batch is refused for each, and neither runs', async () => {
    const before = runs;
    const res = await batch('batch-1');
    expect(res.status).toBe(200);
    const codes = (res.body as Array<{ errors?: Array<{ extensions?: { code?: string } }> }>).map((r) => r.errors?.[0]?.extensions?.code);
    expect(codes).toEqual(['IDEMPOTENCY_KEY_INVALID', 'IDEMPOTENCY_KEY_INVALID']);
    expect(runs).toBe(before);
  });
});
