import type { INestApplication } from '@nestjs/common';
import { SwaggerModule, type OpenAPIObject } from '@nestjs/swagger';
import request from 'supertest';
import { createApp, documentOf, operationOf, type Platform } from './openapi-app.js';

// NestJS 11's Express adapter sends problem bodies as application/json (see lib/nest/problem.ts).
const nestMajor = Number(require('@nestjs/core/package.json').version.split('.')[0]);
const problemType = (platform: Platform) => (platform === 'express' && nestMajor < 12 ? 'application/json' : 'application/problem+json');

const REPLAYED = {
  'Idempotent-Replayed': {
    description: 'Set to true on an answer replayed for a retry with the same key: the request did not run again.',
    schema: { type: 'string', enum: ['true'] },
  },
};

const keyParameter = (name: string, required: boolean, retention: string, fingerprinted = true) => ({
  name,
  in: 'header',
  required,
  description:
    (required
      ? 'A unique key for this operation (for example a UUID), sent again unchanged when retrying it. '
      : 'Optional: a unique key for this operation (for example a UUID), sent again unchanged when retrying it; without one the request runs without idempotency. ') +
    `A retry with the same key within ${retention} of the first answer gets that answer again (marked Idempotent-Replayed: true) instead of running again` +
    (fingerprinted ? '; the same key with a different request is refused with 422.' : '.'),
  schema: { type: 'string', maxLength: 255 },
});

const problemContent = (platform: Platform, code: string) => ({
  [problemType(platform)]: {
    schema: { $ref: '#/components/schemas/IdempotencyProblem' },
    example: expect.objectContaining({ type: `urn:nestjs-idempotency:error:${code}`, code }),
  },
});

const refusals = (platform: Platform, { header = 'Idempotency-Key', required = true, fingerprinted = true, failClosed = true } = {}) => ({
  400: {
    description:
      (required ? `IDEMPOTENCY_KEY_MISSING: no idempotency key in the ${header} header. ` : '') +
      'IDEMPOTENCY_KEY_INVALID: the key is malformed (empty, longer than 255 characters, control characters, more than one value). ' +
      'IDEMPOTENCY_REQUEST_INVALID: the request cannot be fingerprinted (nested too deep).',
    content: problemContent(platform, required ? 'IDEMPOTENCY_KEY_MISSING' : 'IDEMPOTENCY_KEY_INVALID'),
  },
  409: {
    description:
      'IDEMPOTENCY_REQUEST_IN_FLIGHT: a request with this key is still running; retry with the same key after Retry-After seconds to receive its answer. ' +
      'IDEMPOTENCY_RESPONSE_NOT_REPLAYABLE: the first request completed, but its answer could not be stored for replay; it will not run again with this key.',
    headers: {
      'Retry-After': {
        description: 'Seconds to wait before retrying with the same key (IDEMPOTENCY_REQUEST_IN_FLIGHT).',
        schema: { type: 'integer', minimum: 1 },
      },
    },
    content: problemContent(platform, 'IDEMPOTENCY_REQUEST_IN_FLIGHT'),
  },
  ...(fingerprinted
    ? {
        422: {
          description:
            'IDEMPOTENCY_FINGERPRINT_MISMATCH: this key was already used with a different request (method, route parameters, query or body).',
          content: problemContent(platform, 'IDEMPOTENCY_FINGERPRINT_MISMATCH'),
        },
      }
    : {}),
  ...(failClosed
    ? {
        503: {
          description: 'IDEMPOTENCY_STORE_UNAVAILABLE: the idempotency store is unavailable; retry later with the same key.',
          content: problemContent(platform, 'IDEMPOTENCY_STORE_UNAVAILABLE'),
        },
      }
    : {}),
});

describe.each<Platform>(['express', 'fastify'])('the OpenAPI document of @Idempotent() routes (%s)', (platform) => {
  let app: INestApplication;
  let document: OpenAPIObject;

  beforeAll(async () => {
    app = await createApp(platform);
    // Before init(): the usual place, where the library's onModuleInit has not run yet.
    document = documentOf(app);
  });
  afterAll(() => app.close());

  it('documents a POST route with every default: the header, 201 with Idempotent-Replayed, 400/409/422/503 and x-idempotent', () => {
    expect(operationOf(document, 'post', '/payments')).toEqual({
      operationId: 'PaymentsController_create',
      parameters: [keyParameter('Idempotency-Key', true, '24 h')],
      responses: { 201: { description: '', headers: REPLAYED }, ...refusals(platform) },
      tags: ['Payments'],
      'x-idempotent': { header: 'Idempotency-Key', required: true, ttl: 86_400_000 },
    });
  });

  it("uses the route's own header, required: false and ttl; a PUT keeps its 200", () => {
    const operation = operationOf(document, 'put', '/payments/{id}');
    expect(operation.parameters).toEqual([
      { name: 'id', in: 'path', required: true, schema: { type: 'string' } },
      keyParameter('X-Request-Key', false, '1 h'),
    ]);
    expect(operation.responses).toEqual({
      200: { description: '', headers: REPLAYED },
      ...refusals(platform, { header: 'X-Request-Key', required: false }),
    });
    expect(operation['x-idempotent']).toEqual({ header: 'X-Request-Key', required: false, ttl: 3_600_000 });
  });

  it('keeps the @HttpCode() status as the success response', () => {
    const { responses } = operationOf(document, 'post', '/payments/accepted');
    expect(Object.keys(responses)).toEqual(['202', '400', '409', '422', '503']);
    expect(responses[202]).toEqual({ description: '', headers: REPLAYED });
  });

  it('leaves out 503 under fail-open and 422 without a fingerprint', () => {
    const operation = operationOf(document, 'post', '/payments/lenient');
    expect(operation.parameters).toEqual([keyParameter('Idempotency-Key', true, '24 h', false)]);
    expect(operation.responses).toEqual({
      201: { description: '', headers: REPLAYED },
      ...refusals(platform, { fingerprinted: false, failClosed: false }),
    });
  });

  it('documents no header for a key the route derives from the request (x-idempotent header: null)', () => {
    const operation = operationOf(document, 'post', '/payments/webhooks');
    expect(operation.parameters).toEqual([]);
    expect(operation['x-idempotent']).toEqual({ header: null, required: true, ttl: 86_400_000 });
    expect(operation.responses[400].description).toMatch(/^IDEMPOTENCY_KEY_MISSING: no idempotency key in the request \(the key option/);
  });

  it("lets the application's own @ApiHeader / @ApiResponse win, without duplicates", () => {
    const operation = operationOf(document, 'post', '/payments/documented');
    expect(operation.parameters).toEqual([
      { name: 'idempotency-key', in: 'header', required: true, description: 'Our own words about the key.', schema: { type: 'string' } },
    ]);
    expect(operation.responses[409]).toEqual({ description: 'Our own 409.' });
    expect(operation.responses[201]).toEqual({
      description: 'The payment.',
      headers: REPLAYED,
      content: { 'application/json': { schema: { $ref: '#/components/schemas/PaymentDto' } } },
    });
    expect(Object.keys(operation.responses)).toEqual(['201', '400', '409', '422', '503']);
  });

  it('does not add a header or a status the controller documents for all its routes', () => {
    const operation = operationOf(document, 'post', '/refunds');
    expect(operation.parameters).toEqual([
      { name: 'Idempotency-Key', in: 'header', description: 'Documented on the controller.', schema: { type: 'string' } },
    ]);
    expect(operation.responses[503]).toEqual({ description: 'The controller says 503.' });
    expect(operation.responses[201]).toEqual({ description: '', headers: REPLAYED });
    expect(operation['x-idempotent']).toEqual({ header: 'Idempotency-Key', required: true, ttl: 86_400_000 });
  });

  it("keeps the CLI plugin's return type on the success response", () => {
    expect(operationOf(document, 'post', '/plugin').responses[201]).toEqual({
      description: '',
      headers: REPLAYED,
      content: { 'application/json': { schema: { $ref: '#/components/schemas/PaymentDto' } } },
    });
    // A route without @Idempotent() keeps what the plugin gives it.
    expect(operationOf(document, 'get', '/plugin').responses).toEqual({
      200: {
        description: '',
        content: { 'application/json': { schema: { type: 'array', items: { $ref: '#/components/schemas/PaymentDto' } } } },
      },
    });
  });

  it('leaves routes without @Idempotent() untouched and adds no message handler', () => {
    expect(operationOf(document, 'get', '/payments/{id}')).toEqual({
      operationId: 'PaymentsController_find',
      parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string' } }],
      responses: { 200: { description: '' } },
      tags: ['Payments'],
    });
    const operations = Object.values(document.paths).flatMap((item) => Object.values(item as object) as Array<{ operationId: string }>);
    expect(operations.map((operation) => operation.operationId).filter((id) => /fromBroker/.test(id))).toEqual([]);
  });

  it('adds the problem body once, as components.schemas.IdempotencyProblem', () => {
    const text = (description: string) => ({ type: 'string', description, example: expect.any(String) });
    expect(document.components?.schemas?.IdempotencyProblem).toEqual({
      type: 'object',
      properties: {
        type: text('`urn:nestjs-idempotency:error:` and the code.'),
        title: text('A short summary of the problem, the same for every occurrence.'),
        status: { type: 'integer', description: 'The HTTP status of the answer.', example: 400 },
        detail: text('What happened to this request.'),
        code: text('A stable machine-readable code: match on it, not on the text.'),
        hint: text('How to fix it.'),
      },
      required: ['type', 'title', 'status', 'detail', 'code', 'hint'],
    });
  });

  it('serves the same document over HTTP, and the answers match it', async () => {
    SwaggerModule.setup('docs', app, document, { ui: false });
    await app.init();
    if (platform === 'fastify') await (app.getHttpAdapter().getInstance() as { ready(): Promise<void> }).ready();
    const served = await request(app.getHttpServer()).get('/docs-json').expect(200);
    expect(served.body.paths['/payments'].post).toEqual(JSON.parse(JSON.stringify(operationOf(document, 'post', '/payments'))));

    const server = app.getHttpServer();
    const missing = await request(server).post('/payments').send({ amount: 1 }).expect(400);
    expect(missing.headers['content-type']).toContain(problemType(platform));
    expect(missing.body).toEqual(served.body.paths['/payments'].post.responses[400].content[problemType(platform)].example);

    const key = `openapi-${platform}-${Date.now()}`;
    const first = await request(server).post('/payments').set('Idempotency-Key', key).send({ amount: 1 }).expect(201);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    const replay = await request(server).post('/payments').set('Idempotency-Key', key).send({ amount: 1 }).expect(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.body).toEqual(first.body);
    const mismatch = await request(server).post('/payments').set('Idempotency-Key', key).send({ amount: 2 }).expect(422);
    expect(mismatch.headers['content-type']).toContain(problemType(platform));
    expect(mismatch.body.code).toBe('IDEMPOTENCY_FINGERPRINT_MISMATCH');
  });
});
