import { describeTransportConformance } from './conformance.js';
import { rpcDriver } from './rpc.driver.js';

describeTransportConformance(
  '@MessagePattern on Transport.TCP, IdempotencyInterceptor registered globally',
  rpcDriver('tcp', { interceptor: true }),
);
