import { Injectable } from '@nestjs/common';
import { Args, Field, Int, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { Idempotent } from '../../../lib/index.js';

@ObjectType()
export class GiftCard {
  @Field()
  code: string;
  @Field()
  orderId: string;
  @Field(() => Int)
  amount: number;
}

@ObjectType()
export class GiftCardStats {
  @Field(() => Int, { description: 'Gift cards issued by this process (each one a side effect).' })
  issued: number;
  @Field(() => Int)
  total: number;
}

/** Where the effect happens: every call issues a new card (in memory, counted for the demo). */
@Injectable()
export class GiftCards {
  private readonly cards: GiftCard[] = [];

  issue(orderId: string, amount: number): GiftCard {
    const card = { code: `gc_${this.cards.length + 1}_${orderId}`, orderId, amount };
    this.cards.push(card);
    return card;
  }

  stats(): GiftCardStats {
    return { issued: this.cards.length, total: this.cards.reduce((sum, card) => sum + card.amount, 0) };
  }
}

/**
 * A GraphQL mutation that must not run twice: a client that retries `issueGiftCard`
 * after a timeout, with the same `Idempotency-Key` header, gets the card issued the
 * first time. Several `issueGiftCard` fields of one operation (aliased) are one card each.
 */
@Resolver(() => GiftCard)
export class GiftCardsResolver {
  constructor(private readonly cards: GiftCards) {}

  @Mutation(() => GiftCard)
  @Idempotent()
  issueGiftCard(@Args('orderId') orderId: string, @Args('amount', { type: () => Int }) amount: number): GiftCard {
    return this.cards.issue(orderId, amount);
  }

  @Query(() => GiftCardStats)
  giftCards(): GiftCardStats {
    return this.cards.stats();
  }
}
