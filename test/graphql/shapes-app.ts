import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module, type DynamicModule, type INestApplication, type Provider } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { GraphQLSchemaHost } from '@nestjs/graphql';
import {
  Args,
  createUnionType,
  Field,
  GraphQLModule,
  ID,
  Int,
  InterfaceType,
  Mutation,
  ObjectType,
  Parent,
  Query,
  registerEnumType,
  ResolveField,
  Resolver,
  Scalar,
  type CustomScalar,
} from '@nestjs/graphql';
import type { GraphQLObjectType, ValueNode } from 'graphql';
import { Idempotent, IdempotencyModule, type IdempotencyModuleOptions } from '../../lib/index.js';
import { Effects } from '../support/effects.js';

/**
 * Return shapes a plain JSON copy does not resolve as the first answer: unions and
 * interfaces told apart by `instanceof` (Nest's generated resolvers) or by a user
 * `resolveType`, an `isTypeOf` object type, getter fields, enums, `DateTime` and a
 * custom scalar over a class, nested in objects and lists, and a `@ResolveField()`
 * that reads a parent property the schema does not expose.
 */

export class Money {
  constructor(
    readonly cents: number,
    readonly currency: string,
  ) {}
}

@Scalar('Money', () => Money)
export class MoneyScalar implements CustomScalar<string, Money> {
  description = 'An amount and a currency, as "12.50 EUR"';
  serialize(value: unknown): string {
    // Only Money instances: a plain copy of one answers an error.
    if (!(value instanceof Money)) throw new TypeError('Money cannot represent a value that is not a Money');
    return `${(value.cents / 100).toFixed(2)} ${value.currency}`;
  }
  parseValue(value: unknown): Money {
    const [amount, currency] = String(value).split(' ');
    return new Money(Math.round(Number(amount) * 100), currency);
  }
  parseLiteral(ast: ValueNode): Money {
    return this.parseValue((ast as { value?: string }).value);
  }
}

export enum Status {
  Open = 'open',
  Paid = 'paid',
}
registerEnumType(Status, { name: 'Status' });
export enum Priority {
  Low = 1,
  High = 2,
}
registerEnumType(Priority, { name: 'Priority' });

@ObjectType()
export class Card {
  @Field()
  last4: string;
  @Field(() => Money)
  limit: Money;
}

@ObjectType()
export class Wire {
  @Field()
  iban: string;
  @Field()
  sentAt: Date;
}

/** Nest's generated resolveType: `instanceof` the member classes. */
export const Payment = createUnionType({ name: 'Payment', types: () => [Card, Wire] as const });
/** A user resolveType by class. */
export const Method = createUnionType({
  name: 'Method',
  types: () => [Card, Wire] as const,
  resolveType: (value: object) => (value instanceof Card ? Card : value instanceof Wire ? Wire : undefined),
});

/** Nest's generated resolveType: `instanceof` the implementing classes. */
@InterfaceType()
export abstract class Party {
  @Field(() => ID)
  id: string;
}
@ObjectType({ implements: () => [Party] })
export class Person implements Party {
  id: string;
  /** Not in the schema: the getter below reads them. */
  first: string;
  last: string;
  @Field()
  get fullName(): string {
    return `${this.first} ${this.last}`;
  }
  @Field(() => String, { nullable: true })
  get nickname(): string {
    throw new Error(`no nickname for ${this.first}`);
  }
}
@ObjectType({ implements: () => [Party] })
export class Company implements Party {
  id: string;
  @Field()
  legalName: string;
}

/** A user resolveType reading a property that is not in the schema. */
@InterfaceType({ resolveType: (value: { kind?: string }) => (value.kind === 'refund' ? 'RefundEvent' : 'PaymentEvent') })
export abstract class LedgerEvent {
  @Field()
  at: Date;
}
@ObjectType({ implements: () => [LedgerEvent] })
export class PaymentEvent implements LedgerEvent {
  at: Date;
  kind = 'payment';
  @Field(() => Money)
  amount: Money;
}
@ObjectType({ implements: () => [LedgerEvent] })
export class RefundEvent implements LedgerEvent {
  at: Date;
  kind = 'refund';
  @Field()
  reason: string;
}

/**
 * An object type that checks its values: graphql-js asks `isTypeOf` even where the type
 * is concrete. Code-first has no option for it (schema-first and graphql-tools set it):
 * `createShapesApp` sets it on the built schema.
 */
@ObjectType()
export class Receipt {
  @Field()
  number: string;
}

@ObjectType()
export class Order {
  @Field()
  id: string;
  /** Not in the schema: the customerName field resolver reads it. */
  customerId: string;
  @Field(() => Status)
  status: Status;
  @Field(() => Priority)
  priority: Priority;
  @Field(() => Money)
  total: Money;
  @Field(() => [Payment])
  payments: (Card | Wire)[];
  @Field(() => Method)
  preferred: Card | Wire;
  @Field(() => Party)
  buyer: Person | Company;
  @Field(() => [Party])
  parties: Set<Person | Company>;
  @Field(() => [LedgerEvent])
  ledger: LedgerEvent[];
  @Field(() => Receipt)
  receipt: Receipt;
  @Field(() => Int)
  run: number;
}

function make<T extends object>(type: new () => T, fields: Partial<T>): T {
  return Object.assign(new type(), fields);
}

export function orderOf(id: string, run: number): Order {
  const at = new Date(Date.UTC(2026, 1, run, 8, 0));
  const card = make(Card, { last4: '4242', limit: new Money(150_000, 'EUR') });
  const wire = make(Wire, { iban: 'DE89370400440532013000', sentAt: at });
  const person = make(Person, { id: `p_${run}`, first: 'Ada', last: 'Lovelace' });
  const company = make(Company, { id: `c_${run}`, legalName: 'Analytical Engines Ltd' });
  return make(Order, {
    id,
    customerId: 'cus_7',
    status: Status.Paid,
    priority: Priority.High,
    total: new Money(1250 + run, 'EUR'),
    payments: [card, wire],
    preferred: wire,
    buyer: person,
    parties: new Set([company, person]),
    ledger: [make(PaymentEvent, { at, amount: new Money(1250, 'EUR') }), make(RefundEvent, { at, reason: 'damaged' })],
    receipt: make(Receipt, { number: `R-${run}` }),
    run,
  });
}

export const customers: Record<string, string> = { cus_7: 'Grace Hopper' };

export function buildShapeResolvers(effects: Effects): Provider[] {
  @Resolver(() => Order)
  class OrderResolver {
    @Query(() => String)
    health(): string {
      return 'ok';
    }

    @Mutation(() => Order)
    @Idempotent()
    checkout(@Args('orderId') orderId: string): Order {
      return orderOf(orderId, effects.hit(`checkout:${orderId}`));
    }

    @Mutation(() => [Payment])
    @Idempotent()
    pay(@Args('orderId') orderId: string): (Card | Wire)[] {
      return orderOf(orderId, effects.hit(`pay:${orderId}`)).payments;
    }

    @Mutation(() => Party)
    @Idempotent()
    signUp(@Args('name') name: string): Person {
      effects.hit(`signUp:${name}`);
      return make(Person, { id: `p_${name}`, first: name, last: 'Doe' });
    }

    @Mutation(() => Money)
    @Idempotent()
    charge(@Args('orderId') orderId: string): Money {
      return new Money(100 * effects.hit(`charge:${orderId}`), 'USD');
    }

    @Mutation(() => Status)
    @Idempotent()
    close(@Args('orderId') orderId: string): Status {
      effects.hit(`close:${orderId}`);
      return Status.Open;
    }

    /** Runs again on every replay, over the replayed parent: its output is current, not stored. */
    @ResolveField(() => String)
    customerName(@Parent() order: Order): string {
      effects.hit('customerName');
      return customers[order.customerId] ?? `unknown customer ${String(order.customerId)}`;
    }
  }
  return [OrderResolver, MoneyScalar];
}

export async function createShapesApp(
  effects: Effects,
  options: IdempotencyModuleOptions = {},
  providers: Provider[] = [],
): Promise<{ app: INestApplication; url: string }> {
  @Module({})
  class ShapesModule {
    static register(): DynamicModule {
      return {
        module: ShapesModule,
        imports: [
          IdempotencyModule.forRoot({ logger: false, ...options }),
          GraphQLModule.forRoot<ApolloDriverConfig>({
            driver: ApolloDriver,
            autoSchemaFile: true,
            includeStacktraceInErrorResponses: false,
          }),
        ],
        providers: [...buildShapeResolvers(effects), ...providers],
      };
    }
  }
  const app = await NestFactory.create(ShapesModule.register(), { logger: false });
  await app.init();
  const receipt = app.get(GraphQLSchemaHost).schema.getType('Receipt') as GraphQLObjectType;
  receipt.isTypeOf = (value) => value instanceof Receipt;
  await app.listen(0, '127.0.0.1');
  return { app, url: `${await app.getUrl()}/graphql` };
}
