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
 * A shape found by attack (issue 41, item 5, "fail closed where a request carries credentials"): the
 * library recognises credentials only as an `Authorization` or `X-API-Key` header or an
 * express-session user, and callers only on `request.user` / `request.auth`. Two very
 * common shapes fall between: a JWT in an httpOnly cookie (the browser-app default) and
 * an `x-access-token` header, read by a guard that puts the caller on
 * `request.currentUser` (the `@CurrentUser()` decorator pattern of many Nest codebases).
 * Both callers are then "anonymous", share one key space, and bob receives alice's card.
 * The route is guarded (`@UseGuards`): the library could know it is not anonymous.
 */
const CARDS: Record<string, string> = { alice: '4111-alice', bob: '5500-bob' };

@Injectable()
class TokenGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const req = context.switchToHttp().getRequest<{ headers: Record<string, string | undefined>; currentUser?: object }>();
    const cookie = /(?:^|;\s*)access_token=([a-z]+)/.exec(req.headers.cookie ?? '')?.[1];
    const token = cookie ?? req.headers['x-access-token'];
    if (!token || !CARDS[token]) return false; // "verified"
    req.currentUser = { id: token, card: CARDS[token] };
    return true;
  }
}

@Controller('cards')
@UseGuards(TokenGuard)
class CardsController {
  @Post('reveal')
  @Idempotent()
  reveal(@Req() req: { currentUser: { id: string; card: string } }) {
    return { owner: req.currentUser.id, card: req.currentUser.card };
  }
}

@Module({ imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })], controllers: [CardsController] })
class AppModule {}

describe.each<Platform>(['express', 'fastify'])('shape: credentials the library does not see, on %s', (platform) => {
  let app: INestApplication;
  beforeAll(async () => {
    app = await bootShape(platform, AppModule);
  });
  afterAll(async () => {
    await app?.close();
  });

  it.each([
    ['an access_token cookie', (who: string) => ({ Cookie: `theme=dark; access_token=${who}` })],
    ['an x-access-token header', (who: string) => ({ 'x-access-token': who })],
  ])("%s: bob never receives alice's answer", async (_shape, creds) => {
    const key = freshKey('creds');
    const alice = await send(app, key, { path: '/cards/reveal', headers: creds('alice') });
    expect(alice.body).toEqual({ owner: 'alice', card: '4111-alice' });
    const bob = await send(app, key, { path: '/cards/reveal', headers: creds('bob') });
    expect({ status: bob.status, body: bob.body }).not.toEqual({ status: 201, body: { owner: 'alice', card: '4111-alice' } });
  });
});
