import { execFileSync } from 'node:child_process';
import Module from 'node:module';
import { join, resolve, sep } from 'node:path';

const REPO = join(__dirname, '..');

/**
 * The library under test. `BENCH_LIB=/path/to/another/lib` loads another tree (e.g. the
 * lib/ of a `git worktree` of an older commit) so that two versions are measured on the
 * same machine minutes apart; by default the working tree's lib/.
 */
export const LIB_DIR = process.env.BENCH_LIB ? resolve(process.env.BENCH_LIB) : join(REPO, 'lib');

if (process.env.BENCH_LIB) redirectPackageImports();

/**
 * Package imports (`@nestjs/common`, `ioredis`) of the other tree resolve from this
 * repository's node_modules: a `git worktree` has none of its own, and one with its own
 * install would bring a second @nestjs/common, whose classes (Reflector, ModuleRef) the
 * Nest app of bench/app.ts does not provide, and other package versions would then be
 * measured along with the change.
 */
function redirectPackageImports(): void {
  const loader = Module as unknown as { _resolveFilename: (request: string, parent: NodeModule | undefined, ...rest: unknown[]) => string };
  const original = loader._resolveFilename;
  const inside = LIB_DIR + sep;
  loader._resolveFilename = function resolveFromRepo(request, parent, ...rest) {
    const bare = !request.startsWith('.') && !request.startsWith('/') && !request.startsWith('node:');
    if (bare && parent?.filename?.startsWith(inside)) return original.call(this, request, module, ...rest);
    return original.call(this, request, parent, ...rest);
  };
}

/** Which lib a run measured, for the report header: its path and, in a git checkout, its commit. */
export function describeLib(): string {
  const where = process.env.BENCH_LIB ? `BENCH_LIB=${LIB_DIR}` : 'lib/ of this working tree';
  try {
    const git = (...args: string[]) =>
      execFileSync('git', ['-C', LIB_DIR, ...args], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    const commit = git('log', '-1', '--format=%h %s');
    const changed = git('status', '--porcelain', '--', '.') !== '';
    return `${where} (commit ${commit}${changed ? ', with uncommitted changes' : ''})`;
  } catch {
    return `${where} (not in a git checkout)`;
  }
}

export function loadLib(): typeof import('../lib/index.js') {
  return require(join(LIB_DIR, 'index.ts')) as typeof import('../lib/index.js');
}

export function loadLibModule<T>(relative: string): T {
  return require(join(LIB_DIR, relative)) as T;
}
