import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildPageApps, cleanUpDocApps, requestJson, root, startHttpApp, stopApp } from './support/doc-app.js';

/**
 * docs/openapi.md as a user meets it (test/docs/support/doc-app.ts): its app built by
 * `tsc` against the built package and started like `npm start`; the document it serves
 * at /docs-json is compared with every part of it the page prints (the JSON block after
 * each `<!-- openapi: ... -->` marker), and the app's answers with what the document says.
 */
const nestMajor = Number(require('@nestjs/core/package.json').version.split('.')[0]);

interface PrintedPart {
  selector: string;
  json: unknown;
}

/** The JSON blocks the page prints, each with the part of the document it shows. */
function printedParts(): PrintedPart[] {
  const markdown = readFileSync(join(root, 'docs', 'openapi.md'), 'utf8');
  return [...markdown.matchAll(/<!-- openapi: (.+?) -->\s*```json\n([\s\S]*?)\n```/g)].map(([, selector, json]) => ({
    selector,
    json: JSON.parse(json),
  }));
}

/**
 * The part of the document a marker names: `post /payments` (the operation),
 * `post /path field...` (those fields of it), or a dotted path (`components.schemas.X`).
 */
function partOf(document: Record<string, any>, selector: string): unknown {
  const operation = /^(get|put|post|patch|delete) (\/\S*)(?: (.+))?$/.exec(selector);
  if (!operation) return selector.split('.').reduce((value, name) => value?.[name], document);
  const [, method, path, fields] = operation;
  const found = document.paths?.[path]?.[method];
  if (!fields) return found;
  return Object.fromEntries(fields.split(' ').map((field) => [field, found?.[field]]));
}

describe('docs/openapi.md, built and run as a user would', () => {
  let dir: string;

  beforeAll(async () => {
    dir = (await buildPageApps('openapi', ['default'])).get('default')!;
  }, 300_000);
  afterAll(() => cleanUpDocApps());

  it('serves the document the page prints, and answers as it says', async () => {
    const { base, app } = await startHttpApp(dir);
    const served = await requestJson(base, 'GET', '/docs-json');
    expect(served.status).toBe(200);
    const document = served.body as Record<string, any>;

    const parts = printedParts();
    expect(parts.map((part) => part.selector)).toEqual([
      'post /payments',
      'post /payments/{id}/capture parameters x-idempotent',
      'components.schemas.IdempotencyProblem',
    ]);
    // The page prints NestJS 12's document; NestJS 11 with Express sends problem bodies as application/json.
    const forThisNest = (json: unknown) =>
      nestMajor >= 12 ? json : JSON.parse(JSON.stringify(json).replaceAll('"application/problem+json"', '"application/json"'));
    for (const { selector, json } of parts)
      expect({ selector, part: partOf(document, selector) }).toEqual({ selector, part: forThisNest(json) });

    // Routes without @Idempotent() as swagger documents them.
    expect(document.paths['/payments/{id}'].get).not.toHaveProperty('x-idempotent');
    expect(document.paths['/payments/{id}'].get.parameters).toEqual([
      { name: 'id', in: 'path', required: true, schema: { type: 'string' } },
    ]);

    // The answers the document promises.
    const operation = document.paths['/payments'].post;
    const missing = await requestJson(base, 'POST', '/payments', { body: { amount: 500, currency: 'EUR' } });
    expect(missing.status).toBe(400);
    const [mediaType] = Object.keys(operation.responses[400].content);
    expect(missing.headers.get('content-type')).toContain(mediaType);
    expect(missing.body).toEqual(operation.responses[400].content[mediaType].example);

    const key = randomUUID();
    const first = await requestJson(base, 'POST', '/payments', { body: { amount: 500, currency: 'EUR' }, key });
    expect(first).toMatchObject({ status: 201, replayed: null, body: { amount: 500, currency: 'EUR', status: 'pending' } });
    const retry = await requestJson(base, 'POST', '/payments', { body: { amount: 500, currency: 'EUR' }, key });
    expect(retry).toMatchObject({ status: 201, replayed: 'true', body: first.body });
    const reused = await requestJson(base, 'POST', '/payments', { body: { amount: 900, currency: 'EUR' }, key });
    expect(reused.status).toBe(422);
    expect(reused.body).toEqual(operation.responses[422].content[mediaType].example);

    // The capture's key is optional, as documented: without one it runs unprotected.
    const capture = await requestJson(base, 'POST', `/payments/${first.body.id}/capture`);
    expect(capture).toMatchObject({ status: 200, replayed: null, body: { status: 'captured' } });

    // Swagger UI, as main.ts sets it up.
    const ui = await fetch(`${base}/docs`);
    expect(ui.status).toBe(200);
    expect(await ui.text()).toContain('swagger-ui');
    await stopApp(app);
  });
});
