import type { ExecutionContext } from '@nestjs/common';
import { MessageBody, SubscribeMessage, WebSocketGateway } from '@nestjs/websockets';
import { Idempotent } from '../../lib/index.js';
import { RUNTIME_PROPERTY } from '../../lib/nest/internal.js';

/**
 * NestJS 11 (and 12.0) caches a gateway handler's metadata by class name: of two gateway
 * classes of one name (one per feature module) with a method of one name, the second's
 * handler gets a context naming the first's class and handler. `@Idempotent()` runs the
 * protocol with the class and handler that really run, or the two gateways' keys would
 * meet (the ws operation is read from the class's path) and one's options serve the other.
 */
function refundsGateway(path: string) {
  @WebSocketGateway({ path })
  class RefundsGateway {
    @SubscribeMessage('refund')
    @Idempotent({ key: (refund: { id: string }) => refund.id })
    refund(@MessageBody() refund: { id: string }) {
      return refund.id;
    }
  }
  return RefundsGateway;
}

/** A gateway message's context as Nest builds it, naming `owner` and its `refund`. */
function contextNaming(owner: Function, args: unknown[]): ExecutionContext {
  return {
    getType: () => 'ws',
    getClass: () => owner,
    getHandler: () => (owner.prototype as { refund: Function }).refund,
    getArgs: () => args,
    switchToWs: () => ({ getClient: () => args[0], getData: () => args[1], getPattern: () => args[2] }),
  } as unknown as ExecutionContext;
}

it('runs the protocol with the class and handler that really run when Nest names a same-named other class', async () => {
  const Billing = refundsGateway('/billing');
  const Shipping = refundsGateway('/shipping');
  expect(Billing.name).toBe(Shipping.name);
  const seen: ExecutionContext[] = [];
  const shipping = new Shipping() as InstanceType<typeof Shipping> & Record<string, unknown>;
  shipping[RUNTIME_PROPERTY] = {
    handle: (context: ExecutionContext, _options: unknown, invoke: () => unknown) => (seen.push(context), invoke()),
  };
  const args = [{ client: true }, { id: 'r1' }, 'refund'];

  // The stale context Nest 11 hands the second gateway's handler.
  expect(await (shipping.refund as (...a: unknown[]) => unknown)({ id: 'r1' }, contextNaming(Billing, args))).toBe('r1');
  expect(seen[0].getClass()).toBe(Shipping);
  expect(seen[0].getHandler()).toBe(Shipping.prototype.refund);
  expect(seen[0].getArgs()).toBe(args);
  expect(seen[0].switchToWs().getData()).toEqual({ id: 'r1' });
  expect(seen[0].getType()).toBe('ws');

  // The right context is handed on as it is.
  const own = contextNaming(Shipping, args);
  await (shipping.refund as (...a: unknown[]) => unknown)({ id: 'r1' }, own);
  expect(seen[1]).toBe(own);
});
