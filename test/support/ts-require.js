/**
 * A require hook that lets a plain `node` process load this repository's TypeScript
 * sources, for tests that need real child processes (crash and cross-process tests):
 *
 *   node --require ./test/support/ts-require.js test/redis/fixtures/app.ts
 *   fork('fixture.ts', [], { execArgv: ['--require', require.resolve('../support/ts-require.js')] })
 *
 * It compiles `.ts` files with @swc/core (already a dev dependency through @swc/jest)
 * the way jest.config.js does: legacy decorators with metadata, CommonJS output, and
 * `./x.js` relative imports resolved to `./x.ts` (the sources use NodeNext-style
 * `.js` specifiers). Packages stay as they are: the ESM-only Nest 12 packages load
 * through Node's require(esm), unflagged since Node 20.19.
 */
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const Module = require('node:module');
const { transformSync } = require('@swc/core');

const SWC_OPTIONS = {
  jsc: {
    parser: { syntax: 'typescript', decorators: true },
    transform: { legacyDecorator: true, decoratorMetadata: true, useDefineForClassFields: false },
    target: 'es2022',
    keepClassNames: true,
  },
  module: { type: 'commonjs' },
  sourceMaps: 'inline',
};

const originalResolve = Module._resolveFilename;
Module._resolveFilename = function resolveTsSibling(request, parent, ...rest) {
  if (parent && parent.filename && parent.filename.endsWith('.ts') && /^\.\.?\//.test(request) && request.endsWith('.js')) {
    const candidate = path.resolve(path.dirname(parent.filename), request.slice(0, -3) + '.ts');
    if (fs.existsSync(candidate)) return candidate;
  }
  return originalResolve.call(this, request, parent, ...rest);
};

Module._extensions['.ts'] = function compileTypeScript(module, filename) {
  const source = fs.readFileSync(filename, 'utf8');
  const { code } = transformSync(source, { ...SWC_OPTIONS, filename });
  module._compile(code, filename);
};
