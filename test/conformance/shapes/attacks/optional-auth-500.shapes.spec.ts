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
import { bootShape, freshKey, send, type Platform } from '../http-shapes.js';

/**
 * A shape found by attack (docs/security.md 3, "a client's mistake is a 4xx, never a 5xx"): optional
 * authentication, the `OptionalJwtAuthGuard` of many Nest apps (`AuthGuard('jwt')` whose
 * `handleRequest(err, user)` returns `user || null`): a public route, personalised when
 * the caller is signed in. Anonymous callers get 201, signed-in callers 201, and a caller
 * whose token has EXPIRED (or any client that adds `Authorization: Bearer x`) gets
 * 500 IDEMPOTENCY_CONFIGURATION_ERROR, logged as a configuration error of the app.
 * An invalid credential is the client's mistake (401), or an anonymous request as the
 * app's own guard decided; never a server error that pages the on-call.
 */
@Injectable()
class OptionalJwtAuthGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const req = context.switchToHttp().getRequest<{ headers: Record<string, string>; user?: object | null }>();
    const token = req.headers.authorization?.replace('Bearer ', '');
    req.user = token === 'valid-alice' ? { sub: 'alice' } : null; // expired / invalid: anonymous
    return true;
  }
}

@Controller('quotes')
@UseGuards(OptionalJwtAuthGuard)
class QuotesController {
  @Post()
  @Idempotent()
  quote(@Req() req: { user?: { sub: string } | null }) {
    return { price: req.user ? 90 : 100 };
  }
}

@Module({ imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore(), logger: false })], controllers: [QuotesController] })
class AppModule {}

describe.each<Platform>(['express', 'fastify'])('shape: optional authentication with an expired token, on %s', (platform) => {
  let app: INestApplication;
  beforeAll(async () => {
    app = await bootShape(platform, AppModule);
  });
  afterAll(async () => {
    await app?.close();
  });

  it('anonymous 201, signed in 201, expired token: not a 5xx', async () => {
    expect((await send(app, freshKey('opt'), { path: '/quotes' })).status).toBe(201);
    expect((await send(app, freshKey('opt'), { path: '/quotes', headers: { Authorization: 'Bearer valid-alice' } })).status).toBe(201);
    const expired = await send(app, freshKey('opt'), { path: '/quotes', headers: { Authorization: 'Bearer expired-token' } });
    expect({ status: expired.status < 500, code: expired.code }).toEqual({ status: true, code: expired.code });
  });
});
