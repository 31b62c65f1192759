#!/usr/bin/env bash
# Runs the TypeORM suites on TypeORM 0.3 (the main node_modules has 1.x). TypeORM 0.3
# goes to .typeorm03/ and jest.typeorm03.config.js maps every `typeorm` import there;
# drivers (pg, sql.js, mysql2) still come from the main node_modules.
set -euo pipefail
cd "$(dirname "$0")/.."
# The version comes from .ci/legs/typeorm03/package-lock.json (see README, Development).
bash .ci/legs/install.sh typeorm03 .typeorm03
# Child processes the tests start (crash tests) resolve `typeorm` with Node, not Jest:
# this preload points them at .typeorm03 as well.
cat > .typeorm03/resolve-typeorm03.cjs <<'HOOK'
'use strict';
const Module = require('node:module');
const leg = __dirname;
const resolve = Module._resolveFilename;
Module._resolveFilename = function resolveTypeorm03(request, parent, isMain, options) {
  if (request === 'typeorm' || request.startsWith('typeorm/')) return resolve.call(this, request, parent, isMain, { ...options, paths: [leg] });
  return resolve.call(this, request, parent, isMain, options);
};
HOOK
export NODE_OPTIONS="${NODE_OPTIONS:-} --require $PWD/.typeorm03/resolve-typeorm03.cjs"
version=$(node -p "require(require('node:path').join(require.resolve('typeorm'), '..', 'package.json')).version")
echo "TypeORM $version (as child processes resolve it)"
case "$version" in 0.3.*) ;; *) echo "expected TypeORM 0.3 in child processes, got $version" >&2; exit 1 ;; esac
node scripts/jest-all.mjs --config=jest.typeorm03.config.js "$@"
