import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import {
  HttpException,
  Injectable,
  Module,
  type CanActivate,
  type DynamicModule,
  type ExecutionContext,
  type INestApplication,
  type LoggerService,
} from '@nestjs/common';
import { APP_GUARD, NestFactory } from '@nestjs/core';
import { Args, Field, InputType, Int, Mutation, ObjectType, Query, Resolver, GraphQLModule } from '@nestjs/graphql';
import { Idempotent, IdempotencyModule, type IdempotencyModuleOptions } from '../../lib/index.js';
import { Effects } from '../support/effects.js';

export { Effects };

@ObjectType()
export class Refund {
  @Field()
  id: string;
  @Field(() => Int)
  amount: number;
  @Field(() => Int)
  run: number;
  /** DateTime scalars serialize only Date objects: replays must give them back as such. */
  @Field()
  createdAt: Date;
  @Field(() => [Date])
  steps: Date[];
}

@InputType()
export class RefundInput {
  @Field()
  orderId: string;
  @Field(() => Int)
  amount: number;
}

/** Hooks a test sets to hold the resolvers open (a promise they await) or make them fail. */
export interface Hooks {
  gate?: Promise<unknown>;
  /** Called when a gated resolver has started (its effect counted). */
  started?: () => void;
}

/**
 * Test authentication for GraphQL: `x-user: alice` becomes `request.user = { id: 'alice' }`
 * (the request behind the GraphQL context); `x-user: !` sets a user without an id.
 */
@Injectable()
class UserFromHeaderGqlGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request =
      context.getType<string>() === 'graphql' ? context.getArgByIndex(2)?.req : context.switchToHttp().getRequest<Record<string, any>>();
    const user = request?.headers?.['x-user'];
    if (user === '!') request.user = { name: 'no id' };
    else if (user) request.user = { id: user };
    return true;
  }
}

function refundOf(orderId: string, amount: number, run: number): Refund {
  const createdAt = new Date(Date.UTC(2026, 0, run, 12, 30));
  return { id: `rf_${orderId}_${run}`, amount, run, createdAt, steps: [createdAt, new Date(createdAt.getTime() + 1000)] };
}

export function buildResolver(effects: Effects, hooks: Hooks) {
  @Resolver(() => Refund)
  class RefundResolver {
    @Query(() => String)
    health(): string {
      return 'ok';
    }

    @Mutation(() => Refund)
    @Idempotent()
    async refund(@Args('orderId') orderId: string, @Args('amount', { type: () => Int }) amount: number): Promise<Refund> {
      const run = effects.hit(`refund:${orderId}`);
      effects.hit('refund');
      if (hooks.gate) {
        hooks.started?.();
        await hooks.gate;
      }
      return refundOf(orderId, amount, run);
    }

    @Idempotent({ inFlight: 'wait', waitTimeout: 20_000 })
    @Mutation(() => Refund)
    async refundInput(@Args('input') input: RefundInput): Promise<Refund> {
      const run = effects.hit(`refundInput:${input.orderId}`);
      if (hooks.gate) {
        hooks.started?.();
        await hooks.gate;
      }
      return refundOf(input.orderId, input.amount, run);
    }

    /** No parameter decorators: Nest passes the raw resolver arguments. */
    @Mutation(() => Int)
    @Idempotent()
    ping(): number {
      return effects.hit('ping');
    }

    @Mutation(() => Int)
    @Idempotent({ cacheErrors: (error) => error instanceof HttpException && error.getStatus() < 500 })
    decline(@Args('orderId') orderId: string): number {
      throw new HttpException(`order ${orderId} declined (${effects.hit('decline')})`, 402);
    }

    /** The key from the arguments (the `key` option), not from a header. */
    @Mutation(() => Int)
    @Idempotent({ key: (ctx: ExecutionContext) => ctx.getArgByIndex<{ paymentId: string }>(1).paymentId })
    capture(@Args('paymentId') paymentId: string): number {
      return effects.hit(`capture:${paymentId}`);
    }

    @Mutation(() => Int)
    @Idempotent()
    flaky(@Args('orderId') orderId: string): number {
      const run = effects.hit(`flaky:${orderId}`);
      if (run === 1) throw new Error('first attempt fails');
      return run;
    }
  }
  return RefundResolver;
}

export async function createGraphqlApp(
  effects: Effects,
  hooks: Hooks,
  options: IdempotencyModuleOptions = {},
  extra: { providers?: any[]; logger?: LoggerService; graphql?: Partial<ApolloDriverConfig> } = {},
): Promise<{ app: INestApplication; url: string }> {
  const RefundResolver = buildResolver(effects, hooks);
  @Module({})
  class AppModule {
    static register(): DynamicModule {
      return {
        module: AppModule,
        imports: [
          IdempotencyModule.forRoot({ logger: false, ...options }),
          GraphQLModule.forRoot<ApolloDriverConfig>({
            driver: ApolloDriver,
            autoSchemaFile: true,
            includeStacktraceInErrorResponses: false,
            ...extra.graphql,
          }),
        ],
        providers: [RefundResolver, { provide: APP_GUARD, useClass: UserFromHeaderGqlGuard }, ...(extra.providers ?? [])],
      };
    }
  }
  const app = await NestFactory.create(AppModule.register(), { logger: extra.logger ?? false });
  await app.listen(0, '127.0.0.1');
  return { app, url: `${await app.getUrl()}/graphql` };
}

export interface GraphqlResponse {
  status: number;
  data?: Record<string, any> | null;
  errors?: { message: string; path?: (string | number)[]; extensions?: Record<string, any> }[];
}

/** One GraphQL request over real HTTP. */
export async function gql(
  url: string,
  query: string,
  options: { key?: string; headers?: Record<string, string>; variables?: Record<string, unknown> } = {},
): Promise<GraphqlResponse> {
  const headers: Record<string, string> = { 'content-type': 'application/json', ...options.headers };
  if (options.key !== undefined) headers['idempotency-key'] = options.key;
  const response = await fetch(url, { method: 'POST', headers, body: JSON.stringify({ query, variables: options.variables }) });
  const body = (await response.json()) as Omit<GraphqlResponse, 'status'>;
  return { status: response.status, ...body };
}

/** A promise the test resolves by hand, to hold resolvers open without timing. */
export function gate(): { promise: Promise<void>; open: () => void } {
  let open!: () => void;
  const promise = new Promise<void>((resolve) => (open = resolve));
  return { promise, open };
}

/** Polls `probe` until it is true, failing after `timeoutMs`. */
export async function until(probe: () => boolean | Promise<boolean>, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) throw new Error(`gave up after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
