import { join, resolve } from 'node:path';

/**
 * The library under test. `BENCH_LIB=/path/to/a/copy/of/lib` loads another tree (a
 * copy kept from before a change) so that two versions are measured on the same
 * machine minutes apart; by default the working tree's lib/.
 */
export const LIB_DIR = process.env.BENCH_LIB ? resolve(process.env.BENCH_LIB) : join(__dirname, '..', 'lib');

export function loadLib(): typeof import('../lib/index.js') {
  return require(join(LIB_DIR, 'index.ts')) as typeof import('../lib/index.js');
}

export function loadLibModule<T>(relative: string): T {
  return require(join(LIB_DIR, relative)) as T;
}
