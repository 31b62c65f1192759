import {
  Controller,
  Injectable,
  Module,
  Post,
  Req,
  UseGuards,
  type CanActivate,
  type ExecutionContext,
  type INestApplication,
} from '@nestjs/common';
import { Idempotent, IdempotencyModule, MemoryIdempotencyStore } from '../../../../lib/index.js';
import { bootShape, freshKey, send } from '../http-shapes.js';

/**
 * A shape found by attack (issue 41, "a retry that must replay"): the principal's source carries the
 * class of `request.user` (`user<Customer>.id`). With TypeORM single-table inheritance or
 * Mongoose discriminators, a user's class is state: the request that upgrades the
 * account turns `Customer` 7 into `PremiumCustomer` 7. A client that lost the answer
 * retries with the same key; the guard now loads a PremiumCustomer, the principal is
 * `user<PremiumCustomer>.id number:7`, the record is not found, and the upgrade is
 * charged a second time.
 */
class User {
  constructor(readonly id: number) {}
}
class Customer extends User {}
class PremiumCustomer extends Customer {}

const db = { tier: 'basic' as 'basic' | 'premium', charges: 0 };

@Injectable()
class SessionGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const req = context.switchToHttp().getRequest<{ user?: User }>();
    req.user = db.tier === 'premium' ? new PremiumCustomer(7) : new Customer(7); // repository.findOne({ id: 7 })
    return true;
  }
}

@Controller('subscriptions')
@UseGuards(SessionGuard)
class SubscriptionsController {
  @Post('upgrade')
  @Idempotent()
  upgrade(@Req() _req: { user: User }) {
    db.tier = 'premium';
    return { charge: ++db.charges, amount: 9900 };
  }
}

@Module({ imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })], controllers: [SubscriptionsController] })
class AppModule {}

describe('shape: the class of request.user changes with the request', () => {
  let app: INestApplication;
  beforeAll(async () => {
    app = await bootShape('express', AppModule);
  });
  afterAll(async () => {
    await app?.close();
  });

  it('the retry of an upgrade replays, and charges once', async () => {
    const key = freshKey('drift');
    const first = await send(app, key, { path: '/subscriptions/upgrade' });
    expect(first.status).toBe(201);
    const retry = await send(app, key, { path: '/subscriptions/upgrade' });
    expect({ replayed: retry.replayed, charges: db.charges }).toEqual({ replayed: true, charges: 1 });
  });
});
