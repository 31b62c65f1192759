/** Defaults shared by every entry point. Every duration is in milliseconds. */
export const DEFAULT_TTL = 24 * 60 * 60 * 1000;
export const DEFAULT_LEASE_TTL = 30_000;
export const DEFAULT_WAIT_TIMEOUT = 10_000;
export const DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024;
