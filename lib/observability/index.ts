// Listeners with no optional peer: safe for the root entry point. The Prometheus and
// OpenTelemetry listeners live behind their own subpaths so their peers load only on use.
export * from './combine-listeners.js';
export * from './logger.js';
