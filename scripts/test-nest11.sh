#!/usr/bin/env bash
# Runs the Nest-facing suites on NestJS 11. The Nest 11 packages go to .nest11/ so the
# main node_modules (NestJS 12) stays as the lockfile has it; they are installed from a
# committed lockfile, so a new Nest 11 release cannot change what CI tests overnight.
set -euo pipefail
cd "$(dirname "$0")/.."
# The versions come from .ci/legs/nest11/package-lock.json (see README, Development).
bash .ci/legs/install.sh nest11 .nest11
# Child processes the tests start (crash and cross-process fixtures) resolve @nestjs/*
# with Node, not Jest: this preload sends every @nestjs package the leg installs to
# .nest11, as jest.nest11.config.js does. graphql, bullmq, rxjs and the other peers
# keep resolving to the single copy in the main node_modules.
cat > .nest11/resolve-nest11.cjs <<'HOOK'
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const Module = require('node:module');
const leg = __dirname;
const resolve = Module._resolveFilename;
Module._resolveFilename = function resolveNest11(request, parent, isMain, options) {
  const match = /^@nestjs\/([^/]+)/.exec(request);
  if (match && fs.existsSync(path.join(leg, 'node_modules', '@nestjs', match[1]))) {
    return resolve.call(this, request, parent, isMain, { ...options, paths: [leg] });
  }
  return resolve.call(this, request, parent, isMain, options);
};
HOOK
export NODE_OPTIONS="${NODE_OPTIONS:-} --require $PWD/.nest11/resolve-nest11.cjs"
version=$(node -p "require('@nestjs/core/package.json').version")
echo "NestJS $version (as child processes resolve it)"
case "$version" in 11.*) ;; *) echo "expected NestJS 11 in child processes, got $version" >&2; exit 1 ;; esac
# With no arguments: every suite that exercises Nest itself (HTTP, messages, guards,
# health, observability, the sample app, the ecosystem catalogue, the BullMQ, event, schedule and GraphQL
# integrations, and WebSocket gateways with socket.io's conformance driver: the ws driver needs NestJS 12,
# whose exception filter sends a WsException to a ws client, where NestJS 11's emits it on the server's own
# socket object); stores and protocol suites do not depend on the Nest major and run
# once, in `npm test`.
if [ "$#" -eq 0 ]; then
  set -- test/nest test/messages test/tokens test/terminus test/observability test/reliability/security.spec.ts sample-app test/integrations test/graphql test/openapi test/conformance/shapes test/websockets test/conformance/socket.io.conformance.spec.ts test/conformance/socket.io-interceptor.conformance.spec.ts
fi
node scripts/jest-all.mjs --config=jest.nest11.config.js "$@"
