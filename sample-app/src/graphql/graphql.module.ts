import { Module } from '@nestjs/common';
import type { ApolloDriverConfig } from '@nestjs/apollo';
import { GraphQLModule } from '@nestjs/graphql';
import { ApolloExpressDriver } from './apollo-express.driver.js';
import { GiftCards, GiftCardsResolver } from './gift-cards.resolver.js';

/**
 * GraphQL at /graphql (code-first schema, Apollo Server): `issueGiftCard` is an
 * `@Idempotent()` mutation (see docs/graphql.md). A real application uses `ApolloDriver`
 * with `@as-integrations/express5` installed; this repository does not install it, hence
 * the local `ApolloExpressDriver`.
 */
@Module({
  imports: [GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloExpressDriver, autoSchemaFile: true })],
  providers: [GiftCards, GiftCardsResolver],
})
export class SampleGraphqlModule {}
