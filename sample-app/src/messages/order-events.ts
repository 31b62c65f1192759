/** The event published when an order is paid; its `id` is stable per order, so redeliveries share it. */
export interface OrderPaidMessage {
  readonly id: string;
  readonly type: 'order.paid';
  readonly orderId: number;
}

export const ORDER_PAID = 'order.paid';

export function orderPaidMessage(orderId: number): OrderPaidMessage {
  return { id: `order.paid:${orderId}`, type: ORDER_PAID, orderId };
}
