// `.js` so that Node's ESM loader finds it on Nest 11 (no exports map) and 12.
import { HTTP_CODE_METADATA, METHOD_METADATA } from '@nestjs/common/constants.js';
import { IdempotencyProblem } from './problem-schema.js';
import type { RouteContract } from './route-contract.js';
import { PLUGIN_METADATA_FACTORY, type ControllerMetadata, type RouteMetadata, type SwaggerResponse } from './swagger-metadata.js';

/** Nest's `RequestMethod.POST`. */
const POST = 1;

/** A route as the document shows it: the method, the controller it is served on, what the application declared. */
export interface DocumentedRoute {
  readonly method: Function;
  readonly propertyName: string;
  readonly controller: Function;
  readonly original: RouteMetadata;
  readonly controllerMetadata: ControllerMetadata;
}

/**
 * The route's swagger metadata with its idempotency contract added to what the
 * application declared, which wins wherever both describe the same thing: a header of
 * the key's name (on the method or the controller), a response of the same status, an
 * `x-idempotent` extension of its own. Nothing is duplicated and nothing of the
 * application's is dropped:
 *
 * - swagger documents the default success response (201 for POST, else 200, or the
 *   `@HttpCode()` status, with the CLI plugin's return type) only while a method has no
 *   responses of its own, and this adds some; so the default is added back, as swagger
 *   (or its plugin) would have written it;
 * - `Idempotent-Replayed` joins every 2xx response, the controller's included (those are
 *   copied onto the method, where a method's response of the same status replaces
 *   its controller's).
 */
export function withContract(route: DocumentedRoute, contract: RouteContract): RouteMetadata {
  const { original, controllerMetadata } = route;
  const documented = (name: string | undefined) => contract.keyHeaders.includes(String(name).toLowerCase());
  const declaresHeader = [...(original.parameters ?? []), ...controllerMetadata.headers].some(
    (parameter) => parameter.in === 'header' && documented(parameter.name),
  );
  const parameters = contract.parameter && !declaresHeader ? [...(original.parameters ?? []), contract.parameter] : original.parameters;

  const responses: Record<string, SwaggerResponse> = {};
  const defaultStatus = original.responses ? undefined : defaultStatusOf(route.method);
  for (const [status, response] of Object.entries(controllerMetadata.responses)) {
    if (isSuccess(status) && status !== defaultStatus && !(original.responses && status in original.responses))
      responses[status] = withReplayedHeader(response, contract);
  }
  if (defaultStatus !== undefined) {
    // Read when the document is built: SwaggerModule.loadPluginMetadata() (the CLI plugin's
    // metadata under SWC) may run after NestFactory.create(), and swagger applies it then.
    Object.defineProperty(responses, defaultStatus, {
      enumerable: true,
      configurable: true,
      get: () => withReplayedHeader(defaultSuccessResponse(route), contract),
    });
  }
  for (const [status, response] of Object.entries(original.responses ?? {})) {
    responses[status] = isSuccess(status) ? withReplayedHeader(response, contract) : response;
  }
  for (const [status, refusal] of Object.entries(contract.refusals)) {
    if (!(status in responses) && !(status in controllerMetadata.responses)) responses[status] = refusal;
  }

  return {
    parameters,
    responses,
    // An extension of the application's own of that name wins.
    extensions: { 'x-idempotent': contract.extension, ...original.extensions },
    extraModels: [...(original.extraModels ?? []).filter((model) => model !== IdempotencyProblem), IdempotencyProblem],
  };
}

function isSuccess(status: string): boolean {
  return /^2(\d\d|XX)$/i.test(status);
}

function withReplayedHeader(response: SwaggerResponse, contract: RouteContract): SwaggerResponse {
  const headers = response.headers ?? {};
  const has = (name: string) => Object.keys(headers).some((own) => own.toLowerCase() === name.toLowerCase());
  const added = Object.entries(contract.replayedHeader).filter(([name]) => !has(name));
  return added.length === 0 ? response : { ...response, headers: { ...headers, ...Object.fromEntries(added) } };
}

/**
 * What swagger documents for a method without responses of its own (its status, with
 * an empty description), or, when the CLI plugin described the method, the plugin's
 * response (its return type), as swagger's `applyMetadataFactory` would add it before
 * reading the method's responses. The plugin computes the status as `defaultStatusOf`.
 */
function defaultSuccessResponse(route: DocumentedRoute): SwaggerResponse {
  const fromPlugin = pluginResponseOf(route);
  if (!fromPlugin) return { description: '' };
  const { status: _status, ...response } = fromPlugin;
  const [type, isArray] = Array.isArray(response.type) ? [response.type[0], true] : [response.type, response.isArray];
  return {
    ...response,
    ...(type === undefined ? {} : { type }),
    ...(isArray === undefined ? {} : { isArray }),
    description: (response.description as string | undefined) || '',
  };
}

function defaultStatusOf(method: Function): string {
  const code = Reflect.getMetadata(HTTP_CODE_METADATA, method) as number | undefined;
  if (code) return String(code);
  return Reflect.getMetadata(METHOD_METADATA, method) === POST ? '201' : '200';
}

type PluginFactory = () => Record<string, Record<string, unknown> | undefined>;

/** The CLI plugin's response for the method, from the nearest class of the controller's chain that describes it. */
function pluginResponseOf(route: DocumentedRoute): Record<string, unknown> | undefined {
  for (
    let type: unknown = route.controller;
    typeof type === 'function' && type !== Function.prototype;
    type = Object.getPrototypeOf(type)
  ) {
    const factory = (type as unknown as Record<string, unknown>)[PLUGIN_METADATA_FACTORY];
    if (typeof factory !== 'function') continue;
    const entry = (factory as PluginFactory).call(type)[route.propertyName];
    if (!entry) continue;
    const { summary: _summary, deprecated: _deprecated, tags: _tags, ...response } = entry;
    if (Object.keys(response).length > 0) return response;
  }
  return undefined;
}
