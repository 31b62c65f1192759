import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { HttpException, Injectable, Module, type CanActivate, type ExecutionContext, type INestApplication } from '@nestjs/common';
import { APP_GUARD, APP_INTERCEPTOR, NestFactory } from '@nestjs/core';
import {
  Args,
  Context,
  Field,
  GraphQLModule,
  Info,
  Int,
  InterfaceType,
  Mutation,
  ObjectType,
  Query,
  Resolver,
  createUnionType,
} from '@nestjs/graphql';
import { Idempotent, IdempotencyInterceptor, IdempotencyModule } from '../../lib/index.js';
import { Effects } from '../support/effects.js';
import { CONFIGURATION, Hold, IN_FLIGHT, UNREADABLE, KEY_MISSING, MISMATCH, type Answer, type ConformanceDriver } from './conformance.js';
import { StepProbe } from './steps.js';

/**
 * GraphQL mutations (Apollo, code first) over real HTTP. The principal is where GraphQL
 * applications put it: `request.user` (a guard, from `x-user`) or the context's `user`
 * (the common `context: ({ req }) => ({ req, user })`, from `x-ctx-user`).
 */
interface GqlInput {
  readonly amount: number;
}
interface GqlSeen {
  readonly status: number;
  readonly bytes: Buffer;
  readonly body: { data?: Record<string, unknown> | null; errors?: { message: string; extensions?: Record<string, unknown> }[] };
}

const effects = new Effects();
const hold = new Hold();
const stepProbe = new StepProbe();

@ObjectType()
class ConfAnswer {
  @Field()
  operation!: string;
  @Field(() => String, { nullable: true })
  principal?: string;
  @Field(() => Int)
  run!: number;
}

@ObjectType()
class Refunded {
  @Field()
  id!: string;
  @Field(() => Int)
  run!: number;
  @Field()
  at!: Date;
}

@ObjectType()
class Declined {
  @Field()
  reason!: string;
  @Field(() => Int)
  run!: number;
}

/** No resolveType: Nest resolves the member by the value's class, as applications commonly leave it. */
const RefundOutcome = createUnionType({ name: 'RefundOutcome', types: () => [Refunded, Declined] as const });

@InterfaceType()
abstract class Payment {
  @Field()
  id!: string;
  @Field(() => Int)
  run!: number;
}

@ObjectType({ implements: () => [Payment] })
class CardPayment implements Payment {
  @Field()
  id!: string;
  @Field(() => Int)
  run!: number;
  @Field()
  last4!: string;
}

@ObjectType()
class Invoice {
  @Field()
  id!: string;
  @Field(() => Int)
  run!: number;
  @Field()
  get label(): string {
    return `invoice ${this.id} (run ${this.run})`;
  }
}

function principalOf(context: { req?: { user?: { id?: string } }; user?: { id?: string } }): string | undefined {
  return context.user?.id ?? context.req?.user?.id;
}

function answer(operation: string, context: Parameters<typeof principalOf>[0]): ConfAnswer {
  return { operation, principal: principalOf(context), run: effects.hit(operation) };
}

@Resolver()
class ConformanceResolver {
  @Query(() => String)
  health(): string {
    return 'ok';
  }

  @Mutation(() => ConfAnswer)
  @Idempotent()
  refund(
    @Args('amount', { type: () => Int }) _amount: number,
    @Context() context: Parameters<typeof principalOf>[0],
    @Info() info: { path: { key: string | number } },
  ): ConfAnswer {
    // Aliased (`a: refund(...)`), the field answers as `refund@a`: each alias is an operation of its own.
    return answer(info.path.key === 'refund' ? 'refund' : `refund@${info.path.key}`, context);
  }

  @Mutation(() => ConfAnswer)
  @Idempotent()
  credit(@Args('amount', { type: () => Int }) _amount: number, @Context() context: Parameters<typeof principalOf>[0]): ConfAnswer {
    return answer('credit', context);
  }

  @Mutation(() => ConfAnswer)
  @Idempotent()
  async held(
    @Args('amount', { type: () => Int }) _amount: number,
    @Context() context: Parameters<typeof principalOf>[0],
  ): Promise<ConfAnswer> {
    const value = answer('held', context);
    await hold.gate;
    return value;
  }

  @Mutation(() => ConfAnswer)
  @Idempotent()
  async steps(
    @Args('amount', { type: () => Int }) _amount: number,
    @Context() context: Parameters<typeof principalOf>[0],
  ): Promise<ConfAnswer> {
    await stepProbe.run();
    return answer('steps', context);
  }

  @Mutation(() => ConfAnswer)
  @Idempotent({ cacheErrors: (error) => error instanceof HttpException && error.getStatus() === 402 })
  decline(@Args('amount', { type: () => Int }) amount: number): ConfAnswer {
    throw new HttpException(`amount ${amount} declined (run ${effects.hit('decline')})`, 402);
  }

  @Mutation(() => RefundOutcome)
  @Idempotent()
  settle(@Args('amount', { type: () => Int }) amount: number): typeof RefundOutcome {
    const run = effects.hit('settle');
    return Object.assign(new Refunded(), { id: `rf_${amount}`, run, at: new Date(Date.UTC(2026, 0, 2, 3, 4, 5, run)) });
  }

  @Mutation(() => Payment)
  @Idempotent()
  pay(@Args('amount', { type: () => Int }) amount: number): Payment {
    return Object.assign(new CardPayment(), { id: `py_${amount}`, run: effects.hit('pay'), last4: '4242' });
  }

  @Mutation(() => Invoice)
  @Idempotent()
  invoice(@Args('amount', { type: () => Int }) amount: number): Invoice {
    return Object.assign(new Invoice(), { id: `in_${amount}`, run: effects.hit('invoice') });
  }
}

/** Two resolvers named RefundResolver, one per feature module, each with its own mutation. */
function versionedModule(version: string) {
  @Resolver()
  class RefundResolver {
    @Mutation(() => ConfAnswer, { name: `${version}Refund` })
    @Idempotent()
    refund(@Args('amount', { type: () => Int }) _amount: number, @Context() context: Parameters<typeof principalOf>[0]): ConfAnswer {
      return answer(`${version}Refund`, context);
    }
  }
  @Module({ providers: [RefundResolver] })
  class FeatureModule {}
  return FeatureModule;
}

@Injectable()
class UserFromHeaderGqlGuard implements CanActivate {
  canActivate(context: ExecutionContext): boolean {
    const request = context.getType<string>() === 'graphql' ? context.getArgByIndex(2)?.req : context.switchToHttp().getRequest();
    const user = request?.headers?.['x-user'];
    if (user === UNREADABLE) request.user = { name: 'no id' };
    else if (user) request.user = { id: user };
    return true;
  }
}

/** The common Apollo set-up puts the user in the context: `x-ctx-user: alice` is `{ id: 'alice' }`, `!` a user without an id. */
function contextUserOf(header: string | undefined): unknown {
  if (header === UNREADABLE) return { name: 'no id' };
  return header ? { id: header } : undefined;
}

const SELECTIONS: Record<string, string> = {
  refund: '{ operation principal run }',
  credit: '{ operation principal run }',
  held: '{ operation principal run }',
  steps: '{ operation principal run }',
  decline: '{ operation principal run }',
  v1Refund: '{ operation principal run }',
  v2Refund: '{ operation principal run }',
  settle: '{ __typename ... on Refunded { id run at } ... on Declined { reason run } }',
  pay: '{ __typename id run ... on CardPayment { last4 } }',
  invoice: '{ id run label }',
};

function text(seen: GqlSeen): string {
  return `${seen.status} ${seen.bytes.toString('utf8').slice(0, 500)}`;
}

const STATUS_OF: Record<string, number> = { [MISMATCH]: 422, [KEY_MISSING]: 400, [IN_FLIGHT]: 409, [CONFIGURATION]: 500 };

function sameBody(first: GqlSeen, replay: GqlSeen): void {
  expect(first.body.errors).toBeUndefined();
  expect(replay.body).toEqual(first.body);
  expect(replay.bytes.toString('utf8')).toBe(first.bytes.toString('utf8'));
  expect(replay.status).toBe(first.status);
}

/** `interceptor`: IdempotencyInterceptor registered globally (APP_INTERCEPTOR) runs the protocol instead of @Idempotent()'s method wrapper. */
export function graphqlDriver(options: { interceptor?: boolean } = {}): ConformanceDriver<GqlInput, GqlSeen> {
  let app: INestApplication;
  let url = '';
  return {
    entry: options.interceptor ? 'graphql-interceptor' : 'graphql',
    async boot(store) {
      @Module({
        imports: [
          IdempotencyModule.forRoot({ store, logger: false, isGlobal: true }),
          GraphQLModule.forRoot<ApolloDriverConfig>({
            driver: ApolloDriver,
            autoSchemaFile: true,
            includeStacktraceInErrorResponses: false,
            context: ({ req }: { req: { headers: Record<string, string | undefined> } }) => ({
              req,
              user: contextUserOf(req.headers['x-ctx-user']),
            }),
          }),
          versionedModule('v1'),
          versionedModule('v2'),
        ],
        providers: [
          ConformanceResolver,
          { provide: APP_GUARD, useClass: UserFromHeaderGqlGuard },
          ...(options.interceptor ? [{ provide: APP_INTERCEPTOR, useClass: IdempotencyInterceptor }] : []),
        ],
      })
      class AppModule {}
      app = await NestFactory.create(AppModule, { logger: false });
      await app.listen(0, '127.0.0.1');
      url = `${(await app.getUrl()).replace('[::1]', '127.0.0.1')}/graphql`;
    },
    close: () => app.close(),
    async call({ operation, key, principal, via, input }) {
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (key !== undefined) headers['idempotency-key'] = key;
      if (principal) headers[via === 'context.user' ? 'x-ctx-user' : 'x-user'] = principal;
      const [field, alias] = operation.split('@');
      const query = `mutation Conf($amount: Int!) { ${alias ? `${alias}: ` : ''}${field}(amount: $amount) ${SELECTIONS[field]} }`;
      const response = await fetch(url, { method: 'POST', headers, body: JSON.stringify({ query, variables: { amount: input.amount } }) });
      const bytes = Buffer.from(await response.arrayBuffer());
      return { status: response.status, bytes, body: JSON.parse(bytes.toString('utf8')) as GqlSeen['body'] };
    },
    answerOf(seen) {
      const value = seen.body.data ? Object.values(seen.body.data)[0] : undefined;
      if (seen.body.errors || !value) throw new Error(`expected an answer, the caller got ${text(seen)}`);
      return value as Answer;
    },
    refusalOf(seen) {
      if (!seen.body.errors) return undefined;
      const code = seen.body.errors[0]?.extensions?.code;
      if (typeof code !== 'string' || !code.startsWith('IDEMPOTENCY_'))
        throw new Error(`expected the library's refusal, the caller got ${text(seen)}`);
      return code;
    },
    expectRefusalShape(seen, code) {
      // A GraphQL error for the field, with the code and the HTTP status it would have had, and null data.
      expect(seen.body.errors).toHaveLength(1);
      expect(seen.body.errors![0]).toMatchObject({
        message: expect.any(String),
        path: [expect.any(String)],
        extensions: { code, status: STATUS_OF[code] },
      });
      expect(typeof seen.body.errors![0].extensions!.hint).toBe('string');
      expect(seen.body.data ?? null).toBeNull();
    },
    runs: (operation) => effects.count(operation),
    input: { amount: 10 },
    principals: { operation: 'refund', via: ['request.user', 'context.user'], failsClosed: true },
    operations: [
      { name: 'two mutations', a: 'refund', b: 'credit' },
      { name: 'one mutation under two aliases (a: refund, b: refund; docs/graphql.md)', a: 'refund@a', b: 'refund@b' },
      { name: 'two resolvers whose classes share a name (RefundResolver in two modules)', a: 'v1Refund', b: 'v2Refund' },
    ],
    inputs: { operation: 'refund', pairs: [{ name: 'another argument', a: { amount: 1 }, b: { amount: 2 } }] },
    replays: [
      {
        name: 'a union (createUnionType) member with a DateTime field: the same response',
        operation: 'settle',
        input: { amount: 3 },
        expectSame: sameBody,
      },
      { name: 'an interface type: the same response', operation: 'pay', input: { amount: 3 }, expectSame: sameBody },
      { name: 'an object with a getter @Field(): the same response', operation: 'invoice', input: { amount: 3 }, expectSame: sameBody },
      { name: 'an object: the same response', operation: 'refund', input: { amount: 3 }, expectSame: sameBody },
      {
        name: 'a cached error (cacheErrors): the same response',
        operation: 'decline',
        input: { amount: 3 },
        cachedError: true,
        expectSame(first, replay) {
          expect(first.body.errors?.[0]?.message).toMatch(/declined/);
          expect(replay.body).toEqual(first.body);
          expect(replay.bytes.toString('utf8')).toBe(first.bytes.toString('utf8'));
        },
      },
    ],
    refusals: { operation: 'refund', missingKey: true },
    inFlight: { operation: 'held', hold: hold.hold },
    steps: { operation: 'steps', probe: stepProbe },
  };
}
