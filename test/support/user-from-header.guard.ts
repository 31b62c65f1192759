import { Injectable, UnauthorizedException, type CanActivate, type ExecutionContext } from '@nestjs/common';

/**
 * Test authentication: `x-user: alice` becomes `request.user = { id: 'alice' }`, the
 * default scope principal. Like a real guard, it refuses credentials it cannot verify:
 * an `Authorization` header is accepted only as `Bearer <name>` (then `request.user =
 * { id: name }`), anything else is 401, so no request reaches a handler carrying
 * credentials that identify nobody (the library refuses those: see httpPrincipalOf).
 */
@Injectable()
export class UserFromHeaderGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest();
    const user = request.headers['x-user'];
    if (user) request.user = { id: user };
    const authorization = request.headers['authorization'];
    if (authorization === undefined || request.user) return true;
    const bearer = /^Bearer ([A-Za-z0-9._~-]+)$/.exec(String(authorization));
    if (!bearer) throw new UnauthorizedException('unverifiable credentials');
    request.user = { id: bearer[1] };
    return true;
  }
}
