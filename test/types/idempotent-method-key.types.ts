/**
 * Type tests, checked by `tsc --noEmit` (`npm run typecheck`, part of `npm test`), never
 * run: `@Idempotent({ key })` on a provider method types its key function by the method
 * it decorates. Each `@ts-expect-error` fails the type-check when the decorator stops
 * refusing what it marks; each other line fails it when the decorator starts refusing it.
 */
import { Idempotent } from '../../lib/index.js';

interface RefundRequest {
  id: string;
  amount: number;
}

export class TypedKeys {
  @Idempotent({ key: (refund: RefundRequest) => refund.id })
  async ok(refund: RefundRequest) {
    return refund.amount;
  }

  // The key may read the first parameters only.
  @Idempotent({ key: (id: string) => id })
  async more(id: string, amount: number) {
    return `${id}:${amount}`;
  }

  // A key of the first two parameters, and a fingerprint of the same.
  @Idempotent({ key: (id: string, amount: number) => `${id}:${amount}`, fingerprint: (id: string, amount: number) => [id, amount] })
  async both(id: string, amount: number) {
    return `${id}:${amount}`;
  }

  // @ts-expect-error the key reads a RefundRequest, the method takes a string
  // (keep this line: removing the refusal from the decorator types fails the type-check here)
  @Idempotent({ key: (refund: RefundRequest) => refund.id })
  async wrong(id: string) {
    return id;
  }
}
