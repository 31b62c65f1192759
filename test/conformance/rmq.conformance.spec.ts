import { describeTransportConformance } from './conformance.js';
import { rpcDriver } from './rpc.driver.js';

describeTransportConformance('@MessagePattern on Transport.RMQ (ack: true)', rpcDriver('rmq'));
