import { Body, Controller, Module, Post, UploadedFile, UseInterceptors, type INestApplication } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { FileInterceptor } from '@nestjs/platform-express';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { diskStorage } from 'multer';
import request from 'supertest';
import { Idempotent, IdempotencyModule } from '../../lib/index.js';

/**
 * What the fingerprint sees of a body that `request.body` does not show (issue 24,
 * item 9): multer's uploaded files (name, type, size and a hash of the bytes, from memory
 * or disk storage), the raw bytes when Nest keeps them, and a body nothing read, which is
 * refused rather than fingerprinted as "no body".
 */
describe('body fingerprints beyond request.body', () => {
  const uploads = mkdtempSync(join(tmpdir(), 'idem-uploads-'));
  let runs = 0;

  @Controller()
  class UploadsController {
    @Post('memory')
    @UseInterceptors(FileInterceptor('document'))
    @Idempotent()
    memory(@UploadedFile() file: { originalname: string; size: number }, @Body() body: { title: string }) {
      return { run: ++runs, name: file.originalname, size: file.size, title: body.title };
    }

    @Post('disk')
    @UseInterceptors(FileInterceptor('document', { storage: diskStorage({ destination: uploads }) }))
    @Idempotent()
    disk(@UploadedFile() file: { originalname: string; size: number }) {
      return { run: ++runs, name: file.originalname, size: file.size };
    }

    @Post('payload')
    @Idempotent()
    payload(@Body() body: unknown) {
      return { run: ++runs, body };
    }
  }

  @Module({ imports: [IdempotencyModule.forRoot()], controllers: [UploadsController] })
  class AppModule {}

  let app: INestApplication;
  beforeAll(async () => {
    app = await NestFactory.create(AppModule, { logger: false, rawBody: true });
    await app.init();
  });
  afterAll(async () => {
    await app.close();
    rmSync(uploads, { recursive: true, force: true });
  });
  beforeEach(() => (runs = 0));

  const upload = (path: string, key: string, contents: string) =>
    request(app.getHttpServer())
      .post(path)
      .set('Idempotency-Key', key)
      .field('title', 'Q3 report')
      .attach('document', Buffer.from(contents), { filename: 'report.pdf', contentType: 'application/pdf' });

  it.each(['memory', 'disk'])('another file under the same key and fields is 422, the same file a replay (%s storage)', async (storage) => {
    const path = `/${storage}`;
    const first = await upload(path, `upload-${storage}`, 'version one');
    expect(first.status).toBe(201);
    const replay = await upload(path, `upload-${storage}`, 'version one');
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.text).toBe(first.text);
    // Same name, type and size: only the bytes differ.
    const other = await upload(path, `upload-${storage}`, 'version two');
    expect(other.status).toBe(422);
    expect(runs).toBe(1);
  });

  it('with rawBody on, bodies that parse alike but differ in their bytes are two requests', async () => {
    const send = (raw: string) =>
      request(app.getHttpServer()).post('/payload').set('Idempotency-Key', 'raw-1').set('content-type', 'application/json').send(raw);
    expect((await send('{"amount":1,"amount":700}')).status).toBe(201);
    expect((await send('{"amount":1,"amount":700}')).headers['idempotent-replayed']).toBe('true');
    // JSON.parse keeps the last duplicate: the same parsed body, another payload on the wire.
    expect((await send('{"amount":700}')).status).toBe(422);
    expect(runs).toBe(1);
  });

  it('a body no parser read is refused with the fix, not fingerprinted as no body', async () => {
    const response = await request(app.getHttpServer())
      .post('/payload')
      .set('Idempotency-Key', 'csv-1')
      .set('content-type', 'text/csv')
      .send('id,amount\n1,700\n');
    expect(response.status).toBe(400);
    expect(response.body).toMatchObject({ code: 'IDEMPOTENCY_REQUEST_INVALID' });
    expect(response.body.detail).toMatch(/text\/csv/);
    expect(JSON.stringify(response.body)).toMatch(/rawBody: true/);
    expect(runs).toBe(0);
  });
});
