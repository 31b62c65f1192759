// Builds the dual package: dist/esm (ES modules) and dist/cjs (CommonJS), each with
// its own package.json "type" so Node and bundlers read every file the right way.
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
rmSync(join(root, 'dist'), { recursive: true, force: true });

const builds = [
  { dir: 'esm', type: 'module', args: ['--module', 'ES2022', '--moduleResolution', 'Bundler'] },
  { dir: 'cjs', type: 'commonjs', args: ['--module', 'CommonJS', '--moduleResolution', 'Node10', '--ignoreDeprecations', '6.0'] },
];
for (const build of builds) {
  const outDir = join(root, 'dist', build.dir);
  execFileSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json'), '--outDir', outDir, ...build.args], { stdio: 'inherit' });
  mkdirSync(outDir, { recursive: true });
  writeFileSync(join(outDir, 'package.json'), JSON.stringify({ type: build.type }) + '\n');
}
console.log('built dist/esm and dist/cjs');
