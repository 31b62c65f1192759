import axios from 'axios';
import { applyIdempotentRetries } from '../../lib/client/index.js';
import { ScriptedServer, answer } from './scripted-server.js';

/**
 * A retried axios call looks to the application like a call answered at the first attempt
 * (issue 42): its response interceptors registered after applyIdempotentRetries run once,
 * on the answer the call settles with, and a FormData body is sent with the same bytes on
 * every attempt.
 */
describe('applyIdempotentRetries: what the application sees of a retried call', () => {
  const server = new ScriptedServer();
  const fast = { minDelay: 1, maxDelay: 5 };

  beforeAll(() => server.start());
  afterAll(() => server.stop());

  it('a response interceptor that unwraps in place runs once, after a 503 then a 201 as after a 201', async () => {
    const url = server.script('/unwrap', answer(503), answer(201, {}, '{"data":{"id":"ch_1"}}'));
    const instance = applyIdempotentRetries(axios.create(), fast);
    let runs = 0;
    instance.interceptors.response.use((response) => {
      runs++;
      response.data = response.data.data;
      return response;
    });
    const response = await instance.post(url, { amount: 1 });
    expect({ status: response.status, data: response.data, runs }).toEqual({ status: 201, data: { id: 'ch_1' }, runs: 1 });
    expect(server.requestsTo('/unwrap')).toHaveLength(2);
  });

  it('an error interceptor runs once, after the last attempt, and not for the retried ones', async () => {
    const url = server.script('/errors', answer(503), answer(502), answer(404));
    const instance = applyIdempotentRetries(axios.create(), { ...fast, maxAttempts: 5 });
    const seen: number[] = [];
    instance.interceptors.response.use(undefined, (error: { response?: { status: number } }) => {
      seen.push(error.response?.status ?? 0);
      return Promise.reject(error);
    });
    await expect(instance.post(url, {})).rejects.toMatchObject({ response: { status: 404 } });
    expect(seen).toEqual([404]);
    expect(server.requestsTo('/errors')).toHaveLength(3);
  });

  it('a request interceptor that throws on a retry rejects the call with its error', async () => {
    const url = server.script('/refused', answer(503), answer(201));
    const instance = applyIdempotentRetries(axios.create(), fast);
    let calls = 0;
    instance.interceptors.request.use((config) => {
      if (++calls === 2) throw new Error('no token for the retry');
      return config;
    });
    await expect(instance.post(url, {})).rejects.toThrow('no token for the retry');
    expect(server.requestsTo('/refused')).toHaveLength(1);
  });

  it('a FormData body is sent with the same bytes and the same multipart boundary on every attempt', async () => {
    const url = server.script('/form', answer(503), answer(503), answer(201));
    const instance = applyIdempotentRetries(axios.create(), fast);
    const form = new FormData();
    form.append('amount', '7');
    form.append('receipt', new Blob(['%PDF-1.7 bytes'], { type: 'application/pdf' }), 'receipt.pdf');
    expect((await instance.post(url, form)).status).toBe(201);
    const seen = server.requestsTo('/form');
    expect(seen).toHaveLength(3);
    const boundary = /boundary=(.+)$/.exec(seen[0].contentType ?? '')?.[1];
    expect(boundary).toBeDefined();
    expect(seen[0].body).toContain(`--${boundary}`);
    expect(seen[0].body).toContain('%PDF-1.7 bytes');
    expect(new Set(seen.map((request) => `${request.contentType}\n${request.body}`)).size).toBe(1);
  });
});
