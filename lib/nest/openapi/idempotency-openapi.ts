import { Inject, Injectable, Optional } from '@nestjs/common';
import { HttpAdapterHost, ModulesContainer, MetadataScanner } from '@nestjs/core';
import { IdempotencyConfigurationError } from '../../core/errors.js';
import { resolveHandlerConfig } from '../handler-config.js';
import { IDEMPOTENT_METADATA } from '../idempotency.constants.js';
import type { IdempotentOptions } from '../idempotency.options.js';
import { IdempotencyService } from '../idempotency.service.js';
import type { NestModuleRef } from '../provider-instances.js';
import { transportFor } from '../transports/registry.js';
import { idempotencyModuleReachableFrom } from './serving-module.js';
import { problemMediaTypes } from './problem-schema.js';
import { routeContractOf } from './route-contract.js';
import { withContract } from './route-metadata.js';
import { controllerMetadataOf, originalMetadataOf, restoreRouteMetadata, writeRouteMetadata } from './swagger-metadata.js';

/** The members of Nest's module container read here (a Map of modules, each with its controllers). */
type Modules = Map<string, NestModuleRef & { controllers: Map<unknown, { metatype?: Function | null; host?: NestModuleRef | null }> }>;

/**
 * Documents every `@Idempotent()` HTTP route this module serves in the application's
 * OpenAPI document: the key's header parameter, the 400 / 409 / 422 / 503 refusals with
 * their problem bodies, `Idempotent-Replayed` on the success responses and an
 * `x-idempotent` extension (see docs/openapi.md).
 *
 * Runs when Nest builds this provider, inside `NestFactory.create()`: applications call
 * `SwaggerModule.createDocument()` after `create()` and before `init()` / `listen()`, so
 * `onModuleInit` would come too late. It writes the metadata @nestjs/swagger's own
 * decorators write, by their keys, and never loads @nestjs/swagger: an application
 * without it carries a few unread metadata entries and nothing else. Options this module
 * refuses are left to the explorer, which reports them when the application initialises.
 */
@Injectable()
export class IdempotencyOpenApi {
  constructor(
    @Inject(IdempotencyService) service: IdempotencyService,
    modules: ModulesContainer,
    scanner: MetadataScanner,
    @Optional() adapterHost?: HttpAdapterHost,
  ) {
    const enabled = service.options.openApi ?? true;
    if (typeof enabled !== 'boolean') {
      throw new IdempotencyConfigurationError(
        `IdempotencyModule.forRoot(): openApi must be true or false, got ${typeof enabled}.`,
        'Write openApi: false to leave @Idempotent() routes out of the OpenAPI document, or leave it out.',
      );
    }
    const all = modules as unknown as Modules;
    const own = [...all.values()].find((module) => module.providers.get(IdempotencyService)?.instance === service);
    const platform = adapterHost?.httpAdapter?.getType?.();
    const mediaTypes = problemMediaTypes(platform);
    for (const module of all.values()) {
      for (const wrapper of module.controllers.values()) {
        const controller = wrapper.metatype;
        if (typeof controller !== 'function' || !controller.prototype) continue;
        // Controllers another IdempotencyModule serves are that module's to document.
        if (!own || idempotencyModuleReachableFrom(wrapper.host ?? module) !== own) continue;
        const prototype = controller.prototype as Record<string, unknown>;
        for (const propertyName of scanner.getAllMethodNames(prototype)) {
          const method = prototype[propertyName];
          if (typeof method !== 'function') continue;
          const options = Reflect.getMetadata(IDEMPOTENT_METADATA, method) as IdempotentOptions | undefined;
          if (!options) continue;
          const site = { method, owner: controller, propertyName, handlerName: `${controller.name}.${propertyName}` };
          const transport = transportFor(site);
          if (transport.name !== 'http') continue;
          if (!enabled) {
            restoreRouteMetadata(method);
            continue;
          }
          let config;
          try {
            config = resolveHandlerConfig(service, transport, site, options);
          } catch {
            // The explorer stops init() with this error, naming the route and the fix.
            restoreRouteMetadata(method);
            continue;
          }
          const route = {
            method,
            propertyName,
            controller,
            original: originalMetadataOf(method),
            controllerMetadata: controllerMetadataOf(controller),
          };
          writeRouteMetadata(method, withContract(route, routeContractOf(config, mediaTypes)));
        }
      }
    }
  }
}
