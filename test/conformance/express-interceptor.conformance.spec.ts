import { describeTransportConformance } from './conformance.js';
import { httpDriver } from './http.driver.js';

describeTransportConformance('HTTP on Express, IdempotencyInterceptor registered globally', httpDriver('express', { interceptor: true }));
