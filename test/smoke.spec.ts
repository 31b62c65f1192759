import 'reflect-metadata';
import { Controller, Get, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import request from 'supertest';

@Controller()
class C { @Get('x') x() { return { ok: 1 }; } }
@Module({ controllers: [C] })
class M {}

test('boots', async () => {
  const app = await NestFactory.create(M, { logger: false });
  await app.init();
  const r = await request(app.getHttpServer()).get('/x');
  expect(r.body).toEqual({ ok: 1 });
  await app.close();
});
