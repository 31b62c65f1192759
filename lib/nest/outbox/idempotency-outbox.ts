import { randomUUID } from 'node:crypto';
import { Injectable } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { lastValueFrom, type Observable } from 'rxjs';
import { IdempotencyConfigurationError, IdempotencyErrorCode, isIdempotencyError } from '../../core/errors.js';
import { stageOutboxMessage, supportsOutbox } from '../../core/outbox.js';
import { OutboxRelay, resolveRelayOptions, type OutboxRelayOptions } from '../../core/outbox-relay.js';
import type { OutboxMessage } from '../../core/outbox-store.js';
import type { IdempotencyEvent } from '../../core/events.js';
import type { IdempotencyStore } from '../../core/store.js';
import { IdempotencyService } from '../idempotency.service.js';
import { recordWrapFor, type RecordWrap } from './outbox-records.js';

/** What the outbox needs of a `ClientProxy`: its `emit()`. */
interface EmittingClient {
  emit(pattern: unknown, data: unknown): Observable<unknown>;
}

/** A registered symbol travels as its name; other tokens are strings. */
const SYMBOL_PREFIX = 'Symbol.for(';

/**
 * The transactional outbox (docs/outbox.md): messages a handler sends leave exactly when
 * its work is committed. `emit(client, pattern, payload)` is `ClientProxy.emit()` for the
 * client registered under `client` with `ClientsModule`, staged with the current
 * `@Idempotent()` execution (any entry point, `makeIdempotent`, `IdempotencyService.run`)
 * and sent only after its record completed; a handler that throws sends nothing, and a
 * replay does not run the handler, so sends nothing either.
 *
 * A relay in every instance of the application sends what is staged, at least once, and
 * each message carries an id derived from its execution and position (the AMQP
 * `messageId`, the NATS `Nats-Msg-Id` header, the Kafka `idempotency-key` header or MQTT 5
 * user property), so the consumer's `@Idempotent()` applies it once. Tune it with the
 * module's `outbox` option.
 *
 * @example
 * constructor(private readonly outbox: IdempotencyOutbox) {}
 * ...
 * this.outbox.emit('EVENTS', 'refund.completed', { refundId });
 */
@Injectable()
// No `implements OnApplicationBootstrap, OnApplicationShutdown`: the hooks are @internal, so
// the published types leave them out, and the declaration would not compile against them.
export class IdempotencyOutbox {
  private readonly relays = new Map<IdempotencyStore, OutboxRelay>();
  private readonly clients = new Map<string, { client: EmittingClient; wrap?: Promise<RecordWrap> }>();
  private readonly relayOptions: OutboxRelayOptions;
  /** Each relay's store as its `outbox_backlog` events name it (the `store` label of the backlog metrics). */
  private readonly storeLabels = new Map<IdempotencyStore, string>();
  private started = false;

  constructor(
    private readonly service: IdempotencyService,
    private readonly moduleRef: ModuleRef,
  ) {
    this.relayOptions = service.options.outbox ?? {};
    // Checked now, so a mistake stops the application at boot.
    resolveRelayOptions('IdempotencyModule.forRoot({ outbox })', this.relayOptions);
    // The module's store gets the plain class name, whichever relay starts first.
    this.storeLabelOf(service.store);
  }

  /**
   * Stages `payload` for `client.emit(pattern, payload)`, sent once the current execution's
   * record completed. Returns the message's id (what the consumer receives as its key).
   * Unlike `ClientProxy.emit()`, nothing is returned to subscribe to: the message leaves later.
   *
   * Throws `IdempotencyConfigurationError` outside an idempotent execution (to send at once,
   * call the `ClientProxy` itself), for a `client` no `ClientProxy` is registered under, on a
   * store without an outbox and for a payload JSON cannot carry.
   */
  emit(client: string | symbol, pattern: unknown, payload?: unknown): string {
    const name = clientNameOf(client);
    this.clientOf(name);
    if (this.service.options.enabled === false) return this.sendNow(name, pattern, payload);
    const { message, store } = stageOutboxMessage(name, pattern, payload);
    // A transaction's messages are in the tables of the module's store (the relay reads them there).
    if (this.started) this.relayFor(store ?? this.service.store);
    return message.id;
  }

  /**
   * @internal Starts the relay of the module's store, which also sends what other instances
   * left. A store without an outbox table (an application that does not use the outbox and
   * never created it) gets no relay, and so no failing query and log line every poll: its
   * first `emit()` starts one.
   */
  onApplicationBootstrap(): void {
    this.started = true;
    const store = this.service.store;
    if (!supportsOutbox(store)) return;
    // Not awaited: a store unreachable at boot must not hold the application back (its relay
    // starts all the same, and retries); only a configuration error (no table) leaves it off.
    store.outboxBacklog().then(
      () => this.started && this.relayFor(store),
      (error: unknown) => {
        if (!(isIdempotencyError(error) && error.code === IdempotencyErrorCode.Configuration) && this.started) this.relayFor(store);
      },
    );
  }

  /** @internal Stops the relays once their current round ended. */
  async onApplicationShutdown(): Promise<void> {
    this.started = false;
    const relays = [...this.relays.values()];
    this.relays.clear();
    await Promise.all(relays.map((relay) => relay.stop()));
  }

  /**
   * The module is switched off (`enabled: false`, `IdempotencyTestingModule`): handlers run
   * as if undecorated, without an execution, so the message is sent at once, as the
   * handler's own `ClientProxy.emit()` would be.
   */
  private sendNow(client: string, pattern: unknown, payload: unknown): string {
    const message = { id: `msg_${randomUUID()}`, client, pattern, data: payload };
    this.send(message).catch((error: unknown) =>
      this.service.log.warn(
        `outbox:${client}`,
        `The outbox could not send ${message.id} through ${client}: ${(error as Error)?.message ?? String(error)}`,
      ),
    );
    return message.id;
  }

  private relayFor(store: IdempotencyStore): void {
    if (this.relays.has(store) || !supportsOutbox(store)) return;
    const log = this.service.log;
    const storeLabel = this.storeLabelOf(store);
    const onEvent = this.service.policy('outbox').onEvent;
    const emit = (event: IdempotencyEvent): void => {
      try {
        onEvent?.(event);
      } catch {
        // A faulty listener must not stop the relay.
      }
    };
    const relay = new OutboxRelay(store, (message) => this.send(message), this.relayOptions, {
      sent: (message, stagedAt) => {
        const at = Date.now();
        emit({ type: 'outbox_sent', key: message.id, handler: message.client, at, durationMs: at - stagedAt });
      },
      failed: (message, error, retryAt, attempts) => {
        const at = Date.now();
        const reason = `attempt ${attempts}; tried again in ${Math.max(0, retryAt - at)} ms`;
        emit({ type: 'outbox_send_failed', key: message.id, handler: message.client, at, durationMs: 0, error, reason });
        log.warn(
          `outbox:${message.client}`,
          `The outbox could not send ${message.id} through ${message.client} (${reason}): ${(error as Error)?.message ?? String(error)}`,
        );
      },
      storeFailed: (error) =>
        log.warn('outbox:store', `The outbox relay could not reach its store: ${(error as Error)?.message ?? String(error)}`),
      // Read only for a listener of the application's (the default log has no use for it).
      backlog: [this.service.options.onEvent].flat().some(Boolean)
        ? ({ pending, oldestStagedAt }, readMs) => {
            const at = Date.now();
            const oldestAgeMs = oldestStagedAt === undefined ? 0 : Math.max(0, at - oldestStagedAt);
            const reason = `${pending} waiting, the oldest staged ${oldestAgeMs} ms ago`;
            emit({
              type: 'outbox_backlog',
              key: '',
              store: storeLabel,
              at,
              durationMs: 0,
              storeLatencyMs: readMs,
              pending,
              oldestAgeMs,
              reason,
            });
          }
        : undefined,
    });
    this.relays.set(store, relay);
    relay.start();
  }

  /** The store's class name, with `#2`, `#3`, ... for further stores of the same class. */
  private storeLabelOf(store: IdempotencyStore): string {
    let label = this.storeLabels.get(store);
    if (label !== undefined) return label;
    const name = store.constructor?.name || 'IdempotencyStore';
    const taken = new Set(this.storeLabels.values());
    label = name;
    for (let n = 2; taken.has(label); n++) label = `${name}#${n}`;
    this.storeLabels.set(store, label);
    return label;
  }

  private async send(message: OutboxMessage): Promise<void> {
    const entry = this.clientOf(message.client);
    const wrap = await (entry.wrap ??= recordWrapFor(entry.client));
    await lastValueFrom(entry.client.emit(message.pattern, wrap(message)), { defaultValue: undefined });
  }

  private clientOf(name: string): { client: EmittingClient; wrap?: Promise<RecordWrap> } {
    let entry = this.clients.get(name);
    if (entry) return entry;
    const token = name.startsWith(SYMBOL_PREFIX) ? Symbol.for(name.slice(SYMBOL_PREFIX.length, -1)) : name;
    let client: unknown;
    try {
      client = this.moduleRef.get(token, { strict: false });
    } catch {
      client = undefined;
    }
    if (!client || typeof (client as EmittingClient).emit !== 'function') {
      throw new IdempotencyConfigurationError(
        `IdempotencyOutbox.emit(): no ClientProxy is registered as ${name}.`,
        `Register one with ClientsModule.register([{ name: ${typeof token === 'string' ? `'${name}'` : name}, transport: ... }]) in a module of the application.`,
      );
    }
    entry = { client: client as EmittingClient };
    this.clients.set(name, entry);
    return entry;
  }
}

function clientNameOf(client: string | symbol): string {
  if (typeof client === 'string' && client.length > 0) return client;
  if (typeof client === 'symbol') {
    const name = Symbol.keyFor(client);
    if (name !== undefined) return `${SYMBOL_PREFIX}${name})`;
  }
  throw new IdempotencyConfigurationError(
    `IdempotencyOutbox.emit(): the client must be the name a ClientProxy is registered under, got ${typeof client === 'symbol' ? String(client) : typeof client === 'string' ? 'an empty string' : typeof client}.`,
    'Pass the ClientsModule name (a string, or a Symbol.for() symbol: a message waiting in the store names its client).',
  );
}
