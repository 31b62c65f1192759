import { Test } from '@nestjs/testing';
import { Args, Field, Int, Mutation, ObjectType, Query, ResolveField, Resolver, Subscription } from '@nestjs/graphql';
import { Idempotent, IdempotencyModule } from '../../lib/index.js';

/** The boot-time check of `@Idempotent()` resolvers: mutations are served, the other kinds stop app.init(). */
@ObjectType()
class Account {
  @Field(() => Int)
  id: number;
}

async function boot(resolver: Function): Promise<void> {
  const moduleRef = await Test.createTestingModule({
    imports: [IdempotencyModule.forRoot({ logger: false })],
    providers: [resolver as never],
  }).compile();
  try {
    await moduleRef.init();
  } finally {
    await moduleRef.close();
  }
}

describe('boot-time validation of @Idempotent() GraphQL resolvers', () => {
  it('accepts @Mutation() resolvers, whichever decorator comes first', async () => {
    @Resolver()
    class AccountResolver {
      @Mutation(() => Account)
      @Idempotent()
      open(@Args('id', { type: () => Int }) id: number): Account {
        return { id };
      }

      @Idempotent({ inFlight: 'wait' })
      @Mutation(() => Account)
      close(@Args('id', { type: () => Int }) id: number): Account {
        return { id };
      }
    }
    await expect(boot(AccountResolver)).resolves.toBeUndefined();
  });

  it('refuses @Query() with the reason and the fix', async () => {
    @Resolver()
    class AccountQueries {
      @Query(() => Account)
      @Idempotent()
      account(): Account {
        return { id: 1 };
      }
    }
    await expect(boot(AccountQueries)).rejects.toThrow(
      /@Idempotent\(\) on AccountQueries\.account: it is a GraphQL query \(@Query\(\)\).*mutations only.*Remove @Idempotent\(\) from this query, and put it on the @Mutation\(\)/,
    );
  });

  it('refuses @Subscription()', async () => {
    @Resolver()
    class AccountEvents {
      @Idempotent()
      @Subscription(() => Account)
      accountOpened(): unknown {
        return undefined;
      }
    }
    await expect(boot(AccountEvents)).rejects.toThrow(
      /AccountEvents\.accountOpened: it is a GraphQL subscription.*Remove @Idempotent\(\) from this subscription/,
    );
  });

  it('refuses @ResolveField()', async () => {
    @Resolver(() => Account)
    class AccountFields {
      @ResolveField(() => Int)
      @Idempotent()
      balance(): number {
        return 0;
      }
    }
    await expect(boot(AccountFields)).rejects.toThrow(
      /AccountFields\.balance: it is a GraphQL field resolver.*put it on the @Mutation\(\) resolver/,
    );
  });

  it('refuses ack: true on a mutation', async () => {
    @Resolver()
    class AckResolver {
      @Mutation(() => Account)
      @Idempotent({ ack: true })
      open(): Account {
        return { id: 1 };
      }
    }
    await expect(boot(AckResolver)).rejects.toThrow(
      /AckResolver\.open: ack: true acknowledges broker messages, and this is a GraphQL mutation/,
    );
  });
});
