import { HttpService } from '@nestjs/axios';
import { Body, Controller, Module, Post, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import axios, { type AxiosInstance } from 'axios';
import type { AddressInfo } from 'node:net';
import { applyIdempotentRetries, createIdempotentFetch, type RetryInfo } from '../../lib/client/index.js';
import { Idempotent, IdempotencyModule } from '../../lib/index.js';
import { LosingProxy } from './losing-proxy.js';
import { ScriptedServer, answer, hangUp } from './scripted-server.js';

describe('the outgoing client against a real server built with this library', () => {
  let app: INestApplication;
  let port: number;
  let charges = 0;

  @Controller()
  class ChargesController {
    @Post('charges')
    @Idempotent()
    charge(@Body() body: { amount: number }) {
      charges++;
      return { id: `ch_${charges}`, amount: body.amount };
    }
  }

  @Module({ imports: [IdempotencyModule.forRoot()], controllers: [ChargesController] })
  class AppModule {}

  beforeAll(async () => {
    app = await NestFactory.create(AppModule, { logger: false });
    await app.listen(0, '127.0.0.1');
    port = (app.getHttpServer().address() as AddressInfo).port;
  });

  afterAll(() => app?.close());
  beforeEach(() => (charges = 0));

  it('an answer lost on the way back: the retry carries the same key and gets the replay; the handler ran once', async () => {
    const proxy = new LosingProxy(port, 1);
    await proxy.start();
    try {
      const retries: RetryInfo[] = [];
      const idempotentFetch = createIdempotentFetch({ minDelay: 1, maxDelay: 5, onRetry: (info) => retries.push(info) });
      const response = await idempotentFetch(`${proxy.base}/charges`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ amount: 700 }),
      });
      expect(proxy.lost).toBe(1);
      expect(retries).toEqual([expect.objectContaining({ attempt: 1, reason: 'network' })]);
      expect(response.status).toBe(201);
      expect(response.headers.get('idempotent-replayed')).toBe('true');
      expect(await response.json()).toEqual({ id: 'ch_1', amount: 700 });
      expect(charges).toBe(1);
    } finally {
      await proxy.stop();
    }
  });

  it('the same through axios and through @nestjs/axios HttpService', async () => {
    // HttpService's types are axios's ES module ones; the instance is the same at run time.
    const instances: AxiosInstance[] = [axios.create(), new HttpService(axios.create() as never).axiosRef as unknown as AxiosInstance];
    for (const instance of instances) {
      charges = 0;
      const proxy = new LosingProxy(port, 1);
      await proxy.start();
      try {
        applyIdempotentRetries(instance, { minDelay: 1, maxDelay: 5 });
        const response = await instance.post(`${proxy.base}/charges`, { amount: 500 });
        expect(proxy.lost).toBe(1);
        expect(response.status).toBe(201);
        expect(response.headers['idempotent-replayed']).toBe('true');
        expect(response.data).toEqual({ id: 'ch_1', amount: 500 });
        expect(charges).toBe(1);
      } finally {
        await proxy.stop();
      }
    }
  });
});

describe('applyIdempotentRetries against a scripted server', () => {
  const server = new ScriptedServer();
  const fast = { minDelay: 1, maxDelay: 5 };
  beforeAll(() => server.start());
  afterAll(() => server.stop());

  it('503, a dropped connection, then 201: three attempts, one key, the same body', async () => {
    const retries: RetryInfo[] = [];
    const instance = applyIdempotentRetries(axios.create(), { ...fast, onRetry: (info) => retries.push(info) });
    const url = server.script('/ax-a', answer(503), hangUp, answer(201));
    const response = await instance.post(url, { amount: 7 });
    expect(response.status).toBe(201);
    const seen = server.requestsTo('/ax-a');
    expect(seen).toHaveLength(3);
    expect(new Set(seen.map((request) => request.key)).size).toBe(1);
    expect(seen.map((request) => request.body)).toEqual(Array(3).fill('{"amount":7}'));
    expect(retries.map((retry) => retry.reason)).toEqual(['status', 'network']);
  });

  it('422 is an answer (one attempt, axios rejects as usual); GET is sent once without a key; always 503 stops at maxAttempts', async () => {
    const instance = applyIdempotentRetries(axios.create(), { ...fast, maxAttempts: 3 });
    await expect(instance.post(server.script('/ax-b', answer(422)), {})).rejects.toMatchObject({ response: { status: 422 } });
    expect(server.requestsTo('/ax-b')).toHaveLength(1);
    await expect(instance.get(server.script('/ax-c', answer(503)))).rejects.toMatchObject({ response: { status: 503 } });
    expect(server.requestsTo('/ax-c')).toEqual([expect.objectContaining({ key: undefined })]);
    await expect(instance.post(server.script('/ax-d', answer(503)), {})).rejects.toMatchObject({ response: { status: 503 } });
    expect(server.requestsTo('/ax-d')).toHaveLength(3);
  });

  it("keeps the caller's key, and honours Retry-After", async () => {
    const retries: RetryInfo[] = [];
    const instance = applyIdempotentRetries(axios.create(), { ...fast, onRetry: (info) => retries.push(info) });
    const url = server.script('/ax-e', answer(409, { 'retry-after': '1' }), answer(201));
    await instance.post(url, {}, { headers: { 'Idempotency-Key': 'mine-1' } });
    expect(server.requestsTo('/ax-e').map((request) => request.key)).toEqual(['mine-1', 'mine-1']);
    expect(retries[0].delayMs).toBe(1000);
  });
});
