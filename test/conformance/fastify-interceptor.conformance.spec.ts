import { describeTransportConformance } from './conformance.js';
import { httpDriver } from './http.driver.js';

describeTransportConformance('HTTP on Fastify, IdempotencyInterceptor registered globally', httpDriver('fastify', { interceptor: true }));
