import { describeTransportConformance } from './conformance.js';
import { graphqlDriver } from './graphql.driver.js';

describeTransportConformance('GraphQL mutations, IdempotencyInterceptor registered globally', graphqlDriver({ interceptor: true }));
