import { describeTransportConformance } from './conformance.js';
import { scheduleDriver } from './schedule.driver.js';

describeTransportConformance('@Cron() jobs of @nestjs/schedule', scheduleDriver('cron'));
