import { describeTransportConformance } from './conformance.js';
import { httpDriver } from './http.driver.js';

describeTransportConformance('HTTP on Express, records in a RedisIdempotencyStore', httpDriver('express', { redis: true }));
