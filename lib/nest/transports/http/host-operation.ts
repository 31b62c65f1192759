// `.js` so that Node's ESM loader finds it on Nest 11 (no exports map) and 12.
import { HOST_METADATA } from '@nestjs/common/constants.js';
import { canonicalJson } from '../../../core/index.js';

/** @nestjs/platform-fastify's `@RouteConstraints()` metadata key, written out: the platform is an optional peer. */
const FASTIFY_ROUTE_CONSTRAINTS = '__fastify_route_constraints__';

/** What the host part of an operation reads from a request. */
export interface HostRoutedRequest {
  /** The host parameters Nest's router matched (`@Controller({ host: ':tenant.example.com' })`). */
  hosts?: Record<string, unknown>;
  /** Express and Fastify: the request's host name, as Nest's host filter matched it. */
  hostname?: unknown;
}

type HostPattern = string | RegExp;

/** How a handler is bound to hosts: the fixed text of its operation, and what of the request it needs. */
interface HostBinding {
  /** `' host=:tenant.example.com'`: the controller's host patterns and the handler's route constraints. */
  readonly declared: string;
  /** True when the patterns have parameters: the request's `hosts` are part of the operation. */
  readonly params: boolean;
  /** True when a regular expression matches hosts without naming what it captured: the host name is part of the operation. */
  readonly hostname: boolean;
}

const NO_HOST: HostBinding = { declared: '', params: false, hostname: false };

/**
 * The host part of an HTTP operation: Nest's router picks a handler by its controller's
 * `host` (static, with parameters, or a regular expression) and Fastify's by a route's
 * `host` constraint, as much as by its path; so two controllers on one path and two
 * hosts are two operations, and so are two tenants of `:tenant.example.com`: the host
 * parameters the router matched are part of it (a handler bound to several hosts, by an
 * array or a regular expression without named groups, adds the host name it was reached
 * by, since the library cannot tell what of it the handler reads). Empty for a handler
 * bound to no host: operations of 0.6 stay as they were.
 */
export function hostPartOf(handler: Function, controller: Function, request: HostRoutedRequest | undefined): string {
  const binding = bindingOf(handler, controller);
  if (binding === NO_HOST) return '';
  let part = binding.declared;
  if (binding.params) part += ' ' + canonicalJson(request?.hosts ?? {});
  if (binding.hostname || (binding.params && Object.keys(request?.hosts ?? {}).length === 0))
    part += ' @' + String(request?.hostname ?? '');
  return part;
}

/** Once per handler and class: metadata never changes after boot, and this runs on every request. */
const bindings = new WeakMap<Function, WeakMap<Function, HostBinding>>();
function bindingOf(handler: Function, controller: Function): HostBinding {
  let byClass = bindings.get(handler);
  if (!byClass) bindings.set(handler, (byClass = new WeakMap()));
  let binding = byClass.get(controller);
  if (!binding) byClass.set(controller, (binding = readBinding(handler, controller)));
  return binding;
}

function readBinding(handler: Function, controller: Function): HostBinding {
  const declared = Reflect.getMetadata(HOST_METADATA, controller) as HostPattern | HostPattern[] | undefined;
  const hosts = declared === undefined ? [] : Array.isArray(declared) ? declared : [declared];
  const constraints = Reflect.getMetadata(FASTIFY_ROUTE_CONSTRAINTS, handler) as Record<string, unknown> | undefined;
  // `version` is already in the operation (URI template or `@v2`).
  const routed = Object.entries(constraints ?? {}).filter(([name]) => name !== 'version');
  if (hosts.length === 0 && routed.length === 0) return NO_HOST;
  let text = '';
  if (hosts.length > 0) text += ' host=' + hosts.map(String).join('|');
  if (routed.length > 0)
    text += ' constraints=' + canonicalJson(Object.fromEntries(routed.map(([name, value]) => [name, describeConstraint(value)])));
  const regExps = hosts.filter((host): host is RegExp => host instanceof RegExp);
  const constraintRegExp = routed.some(([, value]) => value instanceof RegExp);
  return {
    declared: text,
    params: hosts.some((host) => typeof host === 'string' && host.includes(':')) || regExps.some((re) => /\(\?<[^=!]/.test(re.source)),
    // A handler bound to several hosts (an array, a RegExp without named groups) may serve each differently: the host it was reached by is part of it.
    hostname:
      hosts.length > 1 ||
      regExps.some((re) => !/\(\?<[^=!]/.test(re.source)) ||
      constraintRegExp ||
      routed.some(([, value]) => Array.isArray(value)),
  };
}

/** A constraint's declared value as text (a RegExp is not JSON). */
function describeConstraint(value: unknown): unknown {
  if (value instanceof RegExp) return String(value);
  if (Array.isArray(value)) return value.map(describeConstraint);
  return value;
}
