/**
 * What kind of GraphQL resolver a method is, read from the metadata `@nestjs/graphql`
 * puts on it. That package is an optional peer, so its metadata keys (stable since
 * @nestjs/graphql 7) are written out rather than imported: an application without
 * GraphQL loads neither it nor `graphql`.
 */
const RESOLVER_TYPE_METADATA = 'graphql:resolver_type';
const RESOLVER_PROPERTY_METADATA = 'graphql:resolve_property';
const RESOLVER_REFERENCE_METADATA = 'graphql:resolve_reference';

/** A GraphQL resolver method, by what `@Idempotent()` makes of it. */
export type GraphqlResolverKind = 'graphql-mutation' | 'graphql-query' | 'graphql-subscription' | 'graphql-field';

/**
 * `graphql-mutation` for `@Mutation()`, `graphql-query` for `@Query()`,
 * `graphql-subscription` for `@Subscription()`, `graphql-field` for `@ResolveField()`
 * (and federation's `@ResolveReference()`); undefined when the method is no resolver.
 */
export function graphqlResolverKindOf(method: Function): GraphqlResolverKind | undefined {
  if (Reflect.getMetadata(RESOLVER_PROPERTY_METADATA, method) === true) return 'graphql-field';
  if (Reflect.getMetadata(RESOLVER_REFERENCE_METADATA, method) !== undefined) return 'graphql-field';
  switch (Reflect.getMetadata(RESOLVER_TYPE_METADATA, method) as unknown) {
    case 'Mutation':
      return 'graphql-mutation';
    case 'Query':
      return 'graphql-query';
    case 'Subscription':
      return 'graphql-subscription';
    default:
      return undefined;
  }
}

/** Why `@Idempotent()` refuses each GraphQL resolver kind other than a mutation, and what to do instead. */
export const GRAPHQL_REFUSALS: Record<Exclude<GraphqlResolverKind, 'graphql-mutation'>, readonly [string, string]> = {
  'graphql-query': [
    'it is a GraphQL query (@Query()), and @Idempotent() protects GraphQL mutations only: a query changes nothing, so running it twice is harmless and needs no key.',
    'Remove @Idempotent() from this query, and put it on the @Mutation() that makes the change.',
  ],
  'graphql-subscription': [
    'it is a GraphQL subscription (@Subscription()), which delivers events and has no single result to store or replay.',
    'Remove @Idempotent() from this subscription; protect the @Mutation() (or the provider method) that publishes the events instead.',
  ],
  'graphql-field': [
    'it is a GraphQL field resolver (@ResolveField() or @ResolveReference()), which runs once per parent object of every query and mutation that selects the field.',
    'Remove @Idempotent() from this field resolver, and put it on the @Mutation() resolver that performs the change.',
  ],
};
