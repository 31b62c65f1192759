import { describeTransportConformance } from './conformance.js';
import { wsDriver } from './ws.driver.js';

describeTransportConformance('@SubscribeMessage on @nestjs/platform-ws', wsDriver('ws'));
