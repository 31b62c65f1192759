import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Args, Field, Int, Mutation, ObjectType, Query, Resolver, GraphQLModule } from '@nestjs/graphql';
import { Idempotent, IdempotencyModule } from '../../lib/index.js';
import { PaymentsController, documentOf } from './openapi-app.js';

@ObjectType()
class Refund {
  @Field()
  id!: string;
  @Field(() => Int)
  amount!: number;
}

@Resolver(() => Refund)
class RefundResolver {
  @Query(() => [Refund])
  refunds(): Refund[] {
    return [];
  }

  @Mutation(() => Refund)
  @Idempotent()
  refund(@Args('amount', { type: () => Int }) amount: number): Refund {
    return { id: 'rf_1', amount };
  }
}

describe('OpenAPI documentation of entry points that are not HTTP routes', () => {
  let app: INestApplication;
  afterAll(() => app?.close());

  it('adds nothing for GraphQL mutations and message handlers', async () => {
    @Module({
      imports: [IdempotencyModule.forRoot(), GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true })],
      controllers: [PaymentsController],
      providers: [RefundResolver],
    })
    class AppModule {}
    app = await NestFactory.create(AppModule, { logger: false });
    const document = documentOf(app);
    expect(Object.keys(document.paths)).toEqual([
      '/payments',
      '/payments/{id}',
      '/payments/accepted',
      '/payments/lenient',
      '/payments/webhooks',
      '/payments/documented',
    ]);
    const operationIds = Object.values(document.paths).flatMap((item) =>
      Object.values(item as object).map((op: { operationId: string }) => op.operationId),
    );
    expect(operationIds.filter((id) => /refund|fromBroker/i.test(id))).toEqual([]);
    // Nor any swagger metadata a later document (or another tool reading it) could pick up.
    for (const method of [RefundResolver.prototype.refund, PaymentsController.prototype.fromBroker]) {
      expect(Reflect.getMetadataKeys(method).filter((key: unknown) => String(key).startsWith('swagger/'))).toEqual([]);
    }
    await app.init();
  });
});
