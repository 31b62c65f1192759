import {
  Body,
  Controller,
  Get,
  HttpCode,
  Module,
  Param,
  Post,
  Put,
  type DynamicModule,
  type INestApplication,
  type Type,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { MessagePattern } from '@nestjs/microservices';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import {
  ApiCreatedResponse,
  ApiHeader,
  ApiProperty,
  ApiResponse,
  DocumentBuilder,
  SwaggerModule,
  type OpenAPIObject,
} from '@nestjs/swagger';
import { Idempotent, IdempotencyModule, type IdempotencyModuleOptions } from '../../lib/index.js';

export type Platform = 'express' | 'fastify';

export class PaymentDto {
  @ApiProperty() id!: string;
  @ApiProperty() amount!: number;
}

@Controller('payments')
export class PaymentsController {
  private seq = 0;

  /** Every default: POST, so 201. */
  @Post()
  @Idempotent()
  create(@Body() body: { amount: number }) {
    return { id: `pay_${++this.seq}`, amount: body.amount };
  }

  /** Its own header, optional, shorter retention; PUT, so 200. */
  @Put(':id')
  @Idempotent({ header: 'X-Request-Key', required: false, ttl: 60 * 60 * 1000 })
  replace(@Param('id') id: string, @Body() body: { amount: number }) {
    return { id, amount: body.amount };
  }

  @Post('accepted')
  @HttpCode(202)
  @Idempotent()
  accept() {
    return { queued: true };
  }

  /** No 503 (fail-open) and no 422 (no fingerprint). */
  @Post('lenient')
  @Idempotent({ onStoreError: 'fail-open', fingerprint: false })
  lenient() {
    return { ok: true };
  }

  /** The key comes from the body, not from a header. */
  @Post('webhooks')
  @Idempotent({ key: (context) => context.switchToHttp().getRequest<{ body: { eventId?: string } }>().body.eventId })
  webhook() {
    return { received: true };
  }

  /** The application's own documentation of the header and of 409 and 201 wins. */
  @Post('documented')
  @ApiHeader({ name: 'idempotency-key', description: 'Our own words about the key.', required: true })
  @ApiResponse({ status: 409, description: 'Our own 409.' })
  @ApiCreatedResponse({ type: PaymentDto, description: 'The payment.' })
  @Idempotent()
  documented() {
    return { id: 'pay_documented', amount: 1 };
  }

  /** Not idempotent: left as swagger documents it. */
  @Get(':id')
  find(@Param('id') id: string) {
    return { id };
  }

  /** A message handler in a controller: never an HTTP operation. */
  @MessagePattern('payments.create')
  @Idempotent()
  fromBroker(payload: { amount: number }) {
    return payload;
  }
}

/** The key's header documented once for every route, on the controller. */
@Controller('refunds')
@ApiHeader({ name: 'Idempotency-Key', description: 'Documented on the controller.' })
@ApiResponse({ status: 503, description: 'The controller says 503.' })
export class RefundsController {
  @Post()
  @Idempotent()
  create() {
    return { refunded: true };
  }
}

/**
 * What @nestjs/swagger's CLI plugin compiles into a controller: a static factory naming
 * each method's return type. Written out by hand here, as the plugin would.
 */
@Controller('plugin')
export class PluginController {
  static _OPENAPI_METADATA_FACTORY() {
    return { create: { type: PaymentDto }, list: { type: [PaymentDto] } };
  }

  @Post()
  @Idempotent()
  create() {
    return { id: 'pay_plugin', amount: 1 };
  }

  @Get()
  list() {
    return [];
  }
}

export const CONTROLLERS = [PaymentsController, RefundsController, PluginController];

export interface AppOptions {
  /** The IdempotencyModule: forRoot's options, or a module built another way (forRootAsync). */
  module?: IdempotencyModuleOptions | DynamicModule;
  controllers?: Type[];
}

export async function createApp(platform: Platform, options: AppOptions = {}): Promise<INestApplication> {
  const idempotency =
    options.module && 'module' in options.module
      ? options.module
      : IdempotencyModule.forRoot((options.module as IdempotencyModuleOptions) ?? {});
  @Module({ imports: [idempotency], controllers: options.controllers ?? CONTROLLERS })
  class AppModule {}
  // abortOnError: false, so that a refused boot rejects instead of ending the test process.
  return platform === 'fastify'
    ? NestFactory.create(AppModule, new FastifyAdapter(), { logger: false, abortOnError: false })
    : NestFactory.create(AppModule, { logger: false, abortOnError: false });
}

/** The document, built as applications build it: after create(), before init() or listen(). */
export function documentOf(app: INestApplication): OpenAPIObject {
  return SwaggerModule.createDocument(app, new DocumentBuilder().setTitle('Payments').build());
}

/** The operation `method path` of the document. */
export function operationOf(document: OpenAPIObject, method: string, path: string): Record<string, any> {
  const operation = (document.paths[path] as Record<string, unknown> | undefined)?.[method];
  if (!operation) throw new Error(`no ${method.toUpperCase()} ${path} in the document (paths: ${Object.keys(document.paths).join(', ')})`);
  return operation as Record<string, any>;
}
