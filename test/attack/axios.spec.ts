import axios from 'axios';
import { applyIdempotentRetries } from '../../lib/client/index.js';
import { ScriptedServer, answer } from '../client/scripted-server.js';

/** applyIdempotentRetries (issue 28) with what real applications put around it. */
describe('applyIdempotentRetries: hostile inputs', () => {
  const server = new ScriptedServer();
  const fast = { minDelay: 1, maxDelay: 5 };

  beforeAll(() => server.start());
  afterAll(() => server.stop());

  it("a response interceptor the application adds afterwards transforms a retried call's answer once", async () => {
    const url = server.script('/wrapped', answer(503), answer(201, {}, '{"id":"ch_1"}'));
    const instance = applyIdempotentRetries(axios.create(), fast);
    instance.interceptors.response.use((response) => {
      return { ...response, data: { wrapped: response.data } };
    });
    const response = await instance.post(url, { amount: 1 });
    expect(response.status).toBe(201);
    expect(response.data).toEqual({ wrapped: { id: 'ch_1' } });
  });

  it('an error the application maps in a later response interceptor is mapped once, after the last attempt', async () => {
    const url = server.script('/mapped', answer(503));
    const instance = applyIdempotentRetries(axios.create(), { ...fast, maxAttempts: 3 });
    instance.interceptors.response.use(undefined, (error: { response?: { status: number } }) =>
      Promise.reject(new Error(`mapped ${error.response?.status ?? 'no response'}`)),
    );
    await expect(instance.post(url, {})).rejects.toThrow(/^mapped 503$/);
    expect(server.requestsTo('/mapped')).toHaveLength(3);
  });

  it('a request interceptor the application adds afterwards sees the key and the retries carry it', async () => {
    const url = server.script('/signed', answer(503), answer(201));
    const instance = applyIdempotentRetries(axios.create(), fast);
    instance.interceptors.request.use((config) => {
      config.headers.set('x-signed', 'yes');
      return config;
    });
    await instance.post(url, 'body');
    const seen = server.requestsTo('/signed');
    expect(seen).toHaveLength(2);
    expect(new Set(seen.map((request) => request.key)).size).toBe(1);
  });

  it.each([
    ['URLSearchParams', () => new URLSearchParams({ a: '1', b: 'two' }), 'a=1&b=two'],
    ['Buffer', () => Buffer.from('raw bytes'), 'raw bytes'],
    ['object', () => ({ amount: 7 }), '{"amount":7}'],
  ])('a %s body is sent identically on every attempt', async (what, data, sent) => {
    const path = `/body-${what}`;
    const url = server.script(path, answer(503), answer(503), answer(201));
    const instance = applyIdempotentRetries(axios.create(), fast);
    expect((await instance.post(url, data())).status).toBe(201);
    expect(server.requestsTo(path).map((request) => request.body)).toEqual([sent, sent, sent]);
  });

  it('a custom validateStatus that accepts every status still retries a 503', async () => {
    const url = server.script('/validate', answer(503), answer(201));
    const instance = applyIdempotentRetries(axios.create({ validateStatus: () => true }), fast);
    expect((await instance.post(url, {})).status).toBe(201);
    expect(server.requestsTo('/validate')).toHaveLength(2);
  });
});
