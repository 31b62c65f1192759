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
 * A shape found by attack (issue 41, item 4; docs/security.md 1): a JWT's `sub` is unique only within its
 * issuer (OIDC Core 2 / 5.7: "iss and sub, used together, are the only Claims an RP can
 * rely upon as a stable identifier"). Apps that accept several issuers (Google and
 * Microsoft sign-in, Firebase beside Auth0, or per-customer enterprise SSO where each
 * customer registers its OWN IdP) get `request.user` / `request.auth` = the verified
 * payload. The principal is `user.sub string:<sub>` whatever `iss` says, so a customer who
 * controls its own IdP mints `sub` = the victim's sub and replays the victim's stored
 * answers (with a leaked or predictable key: A2). Same on `request.auth` (express-jwt).
 */
@Injectable()
class MultiIssuerJwtGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const req = context.switchToHttp().getRequest<{ headers: Record<string, string>; user?: object; auth?: object }>();
    // "Verified" against the issuer's JWKS; the payload as passport-jwt / express-jwt hand it on.
    const [iss, sub] = (req.headers.authorization ?? '').replace('Bearer ', '').split('|');
    const payload = { iss, sub, aud: 'orders-api' };
    if (req.headers['x-lib'] === 'express-jwt') req.auth = payload;
    else req.user = payload;
    return true;
  }
}

@Controller('statements')
@UseGuards(MultiIssuerJwtGuard)
class StatementsController {
  @Post()
  @Idempotent()
  create(@Req() req: { user?: { iss: string }; auth?: { iss: string } }) {
    const who = req.user ?? req.auth!;
    return { for: who, iban: who.iss === 'https://accounts.google.com' ? 'DE89 3704 0044 0532 0130 00' : 'none' };
  }
}

@Module({ imports: [IdempotencyModule.forRoot({ store: new MemoryIdempotencyStore() })], controllers: [StatementsController] })
class AppModule {}

describe.each<Platform>(['express', 'fastify'])('shape: one sub at two issuers, on %s', (platform) => {
  let app: INestApplication;
  beforeAll(async () => {
    app = await bootShape(platform, AppModule);
  });
  afterAll(async () => {
    await app?.close();
  });

  it.each(['passport-jwt', 'express-jwt'])("%s: the evil issuer never receives the victim's answer", async (lib) => {
    const key = freshKey('iss');
    const victim = await send(app, key, {
      path: '/statements',
      headers: { Authorization: 'Bearer https://accounts.google.com|108234', 'x-lib': lib },
    });
    expect(victim.status).toBe(201);
    const evil = await send(app, key, {
      path: '/statements',
      headers: { Authorization: 'Bearer https://sso.evil.example|108234', 'x-lib': lib },
    });
    expect({ replayed: evil.replayed, text: evil.text }).not.toEqual({ replayed: true, text: victim.text });
  });
});
