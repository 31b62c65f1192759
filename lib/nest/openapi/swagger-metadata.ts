/**
 * The metadata @nestjs/swagger's decorators write and `SwaggerModule.createDocument()`
 * reads, by the keys of its `DECORATORS` constants (the same in versions 7 to 12). Plain
 * strings on purpose: the library writes them with `Reflect` and never imports
 * @nestjs/swagger, which stays optional.
 */
export const SWAGGER_KEYS = {
  /** A method's parameters: what `@ApiHeader()`, `@ApiQuery()`, ... on a method add (an array). */
  parameters: 'swagger/apiParameters',
  /** Headers of every route of a controller: `@ApiHeader()` on the class (an array). */
  classHeaders: 'swagger/apiHeaders',
  /** Responses by status: `@ApiResponse()` on a method, or on a class for all its routes (an object). */
  responses: 'swagger/apiResponse',
  /** `x-` extensions of the operation: `@ApiExtension()` (an object). */
  extensions: 'swagger/apiExtension',
  /** Classes whose schemas join `components.schemas`: `@ApiExtraModels()` (an array). */
  extraModels: 'swagger/apiExtraModels',
} as const;

/** Where the CLI plugin leaves what it read from the code (return types become responses). */
export const PLUGIN_METADATA_FACTORY = '_OPENAPI_METADATA_FACTORY';

/** A parameter as `@ApiHeader()` records it. */
export interface SwaggerParameter {
  readonly name?: string;
  readonly in?: string;
  readonly [key: string]: unknown;
}

/** A response as `@ApiResponse()` records it (its status is the key it is stored under). */
export interface SwaggerResponse {
  readonly description?: string;
  readonly headers?: Record<string, object>;
  readonly [key: string]: unknown;
}

export type SwaggerResponses = Readonly<Record<string, SwaggerResponse>>;

/** The method's own swagger metadata, as the application's decorators left it. */
export interface RouteMetadata {
  readonly parameters?: readonly SwaggerParameter[];
  readonly responses?: SwaggerResponses;
  readonly extensions?: Readonly<Record<string, unknown>>;
  readonly extraModels?: readonly unknown[];
}

/**
 * Where the method's metadata from before the library wrote its own is kept: on the
 * method, so that each application built in one process (tests build many, with other
 * options) starts again from the application's decorators, and the ESM and CommonJS
 * copies of this package share it.
 */
const ORIGINAL = 'nestjs-idempotency:openapi-original';

/** The method's swagger metadata as the application's own decorators wrote it (before any of this library's). */
export function originalMetadataOf(method: Function): RouteMetadata {
  const kept = Reflect.getOwnMetadata(ORIGINAL, method) as RouteMetadata | undefined;
  if (kept) return kept;
  const original: RouteMetadata = {
    parameters: Reflect.getMetadata(SWAGGER_KEYS.parameters, method) as SwaggerParameter[] | undefined,
    responses: Reflect.getMetadata(SWAGGER_KEYS.responses, method) as SwaggerResponses | undefined,
    extensions: Reflect.getMetadata(SWAGGER_KEYS.extensions, method) as Record<string, unknown> | undefined,
    extraModels: Reflect.getMetadata(SWAGGER_KEYS.extraModels, method) as unknown[] | undefined,
  };
  Reflect.defineMetadata(ORIGINAL, original, method);
  return original;
}

/** Writes the method's swagger metadata (each field undefined: as the application had it, i.e. none). */
export function writeRouteMetadata(method: Function, metadata: RouteMetadata): void {
  const write = (key: string, value: unknown) => {
    if (value === undefined) Reflect.deleteMetadata(key, method);
    else Reflect.defineMetadata(key, value, method);
  };
  write(SWAGGER_KEYS.parameters, metadata.parameters);
  write(SWAGGER_KEYS.responses, metadata.responses);
  write(SWAGGER_KEYS.extensions, metadata.extensions);
  write(SWAGGER_KEYS.extraModels, metadata.extraModels);
}

/** Puts back what the application's decorators wrote (an application built with `openApi: false` after one without). */
export function restoreRouteMetadata(method: Function): void {
  const kept = Reflect.getOwnMetadata(ORIGINAL, method) as RouteMetadata | undefined;
  if (kept) writeRouteMetadata(method, kept);
}

/** A controller's own swagger metadata for all its routes (class decorators, inherited ones included, as swagger reads them). */
export interface ControllerMetadata {
  readonly headers: readonly SwaggerParameter[];
  readonly responses: SwaggerResponses;
}

export function controllerMetadataOf(controller: Function): ControllerMetadata {
  return {
    headers: (Reflect.getMetadata(SWAGGER_KEYS.classHeaders, controller) as SwaggerParameter[] | undefined) ?? [],
    responses: (Reflect.getMetadata(SWAGGER_KEYS.responses, controller) as SwaggerResponses | undefined) ?? {},
  };
}
