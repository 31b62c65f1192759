import { describeTransportConformance } from './conformance.js';
import { wsDriver } from './ws.driver.js';

describeTransportConformance(
  '@SubscribeMessage on @nestjs/platform-socket.io, IdempotencyInterceptor registered globally',
  wsDriver('socket.io', { interceptor: true }),
);
