import { describeTransportConformance } from './conformance.js';
import { scheduleDriver } from './schedule.driver.js';

describeTransportConformance('@Interval() jobs of @nestjs/schedule', scheduleDriver('interval'));
