import { Gate, until } from '../integrations/support.js';
import { realStores, type StoreUnderTest } from '../support/real-stores.js';
import { disconnects, effects, gates, gatewayModule } from './orders-gateway.js';
import { closeClients, connect, startGatewayApp, type GatewayApp } from './support.js';

/**
 * A message re-sent to another instance: two instances of one gateway application share a
 * store (Redis, PostgreSQL through TypeORM); a client sends to the first, loses its
 * connection while the handler runs, reconnects to the second (as a load balancer sends
 * it) and re-sends. With `inFlight: 'wait'` the second instance waits for the first
 * instance's run and answers with its result from the record; the handler runs once.
 */
let sequence = 0;

describe.each(realStores('ws_across').slice(1))('a re-send to another instance, on %s', (_name, open) => {
  let backend: StoreUnderTest;
  const instances: GatewayApp[] = [];

  beforeAll(async () => {
    backend = await open();
  });
  afterEach(async () => {
    closeClients();
    for (const instance of instances.splice(0)) await instance.close();
  });
  afterAll(() => backend?.dispose());

  it.each(['socket.io', 'ws'] as const)('%s: the second instance answers from the first one’s record', async (platform) => {
    const [a, b] = await Promise.all([
      startGatewayApp(platform, gatewayModule(platform, { store: backend.store })),
      startGatewayApp(platform, gatewayModule(platform, { store: backend.store })),
    ]);
    instances.push(a, b);
    const id = `across-${platform}-${process.pid}-${++sequence}`;
    const gate = new Gate();
    gates.set(id, gate);

    const first = await connect(platform, a.base, '/orders');
    first.fire('place-wait', { requestId: id, sku: 'chair' });
    await until('the handler to start on the first instance', () => effects.count(id) === 1, 5_000);
    const closed = disconnects.count;
    first.close();
    await until('the first instance to see the connection close', () => disconnects.count > closed, 5_000);

    const again = await connect(platform, b.base, '/orders');
    const answer = again.send('place-wait', { requestId: id, sku: 'chair' });
    gate.open();
    expect(await answer).toEqual({ kind: 'ack', value: { orderId: `o_${id}`, sku: 'chair', run: 1, by: null } });
    expect(effects.count(id)).toBe(1);
  });
});
