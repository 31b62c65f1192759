import { BadRequestException, Body, Controller, Headers, HttpCode, Inject, Post, type ExecutionContext } from '@nestjs/common';
import type { DataSource } from 'typeorm';
import { createHash } from 'node:crypto';
import { OneTimeTokenService, RequireOneTimeToken } from '../../../lib/tokens/index.js';
import { runIdempotentTransaction } from '../../../lib/typeorm/index.js';
import { Checkout } from '../entities.js';
import { DATA_SOURCE } from '../tokens.js';

interface CheckoutRequest {
  cartId: string;
  total: number;
}

/** The token is bound to one cart: a token issued for cart A is unknown to cart B. */
const checkoutScope = (cartId: string) => `checkout:${cartId}`;
const scopeOfRequest = (context: ExecutionContext) => checkoutScope(String(context.switchToHttp().getRequest<{ body?: Partial<CheckoutRequest> }>().body?.cartId));

/**
 * "Pay now" from a browser: double clicks, a resubmitted form, a back button. Here the
 * server hands out the key itself: the checkout page gets a one-time token, and the
 * submission is accepted only while that token is unused (atomically, however many
 * submissions race). A second submission gets 409 IDEMPOTENCY_TOKEN_USED.
 */
@Controller('checkout')
export class CheckoutController {
  constructor(
    private readonly tokens: OneTimeTokenService,
    @Inject(DATA_SOURCE) private readonly dataSource: DataSource,
  ) {}

  /** Called when the checkout page renders. */
  @Post('tokens')
  async issue(@Body() body: { cartId: string }) {
    if (typeof body?.cartId !== 'string' || body.cartId === '') throw new BadRequestException('Send { cartId: string }.');
    return { token: await this.tokens.issue(checkoutScope(body.cartId), { ttl: 10 * 60_000 }) };
  }

  @Post()
  @HttpCode(201)
  @RequireOneTimeToken({ header: 'Checkout-Token', bodyField: 'checkoutToken', scope: scopeOfRequest })
  async checkout(@Body() body: CheckoutRequest & { checkoutToken?: string }, @Headers('checkout-token') headerToken: string | undefined) {
    if (!Number.isInteger(body.total) || body.total <= 0) throw new BadRequestException('Send { cartId, total: positive integer }.');
    // The guard consumed the token before this line. Its hash also keys the row, under a
    // unique index: one checkout per token even if the token store lost its state.
    const idemKey = createHash('sha256').update(headerToken ?? body.checkoutToken ?? '').digest('base64url');
    return runIdempotentTransaction(this.dataSource, { key: idemKey, scope: 'checkout' }, async (manager) => {
      const checkout = await manager.save(manager.create(Checkout, { idemKey, cartId: body.cartId, total: body.total }));
      return { checkoutId: checkout.id, cartId: checkout.cartId, total: checkout.total };
    });
  }
}
