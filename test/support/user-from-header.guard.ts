import { Injectable, type CanActivate, type ExecutionContext } from '@nestjs/common';

/** Test authentication: `x-user: alice` becomes `request.user = { id: 'alice' }`, the default scope principal. */
@Injectable()
export class UserFromHeaderGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.switchToHttp().getRequest();
    const user = request.headers['x-user'];
    if (user) request.user = { id: user };
    return true;
  }
}
