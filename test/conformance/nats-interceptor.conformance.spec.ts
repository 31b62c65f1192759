import { describeTransportConformance } from './conformance.js';
import { rpcDriver } from './rpc.driver.js';

describeTransportConformance(
  '@MessagePattern on Transport.NATS, IdempotencyInterceptor registered globally',
  rpcDriver('nats', { interceptor: true }),
);
