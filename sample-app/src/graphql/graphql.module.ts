import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { GraphQLModule } from '@nestjs/graphql';
import { GiftCards, GiftCardsResolver } from './gift-cards.resolver.js';

/**
 * GraphQL at /graphql (code-first schema, Apollo Server): `issueGiftCard` is an
 * `@Idempotent()` mutation (see docs/graphql.md). Apollo on Express 5 needs
 * `@as-integrations/express5` installed beside `@nestjs/apollo`.
 */
@Module({
  imports: [GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true })],
  providers: [GiftCards, GiftCardsResolver],
})
export class SampleGraphqlModule {}
