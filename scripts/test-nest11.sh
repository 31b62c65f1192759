#!/usr/bin/env bash
# Runs the Nest-facing suites on NestJS 11. The Nest 11 packages go to .nest11/ so the
# main node_modules (NestJS 12) stays as the lockfile has it.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .nest11
if [ ! -f .nest11/node_modules/@nestjs/core/package.json ] || ! grep -q '"version": "11\.' .nest11/node_modules/@nestjs/core/package.json; then
  echo '{ "name": "nest11-leg", "private": true }' > .nest11/package.json
  npm install --prefix .nest11 --no-save --no-package-lock --legacy-peer-deps --no-audit --no-fund \
    @nestjs/common@^11 @nestjs/core@^11 @nestjs/platform-express@^11 @nestjs/platform-fastify@^11 \
    @nestjs/microservices@^11 @nestjs/testing@^11 @nestjs/terminus@^11
fi
node -e "console.log('NestJS', require('./.nest11/node_modules/@nestjs/core/package.json').version)"
# With no arguments: every suite that exercises Nest itself (HTTP, messages, guards,
# health, observability, the sample app); stores and protocol suites do not depend on
# the Nest major and run once, in `npm test`.
if [ "$#" -eq 0 ]; then
  set -- test/nest test/messages test/tokens test/health test/observability test/reliability/security.spec.ts sample-app
fi
npx jest -c jest.nest11.config.js "$@"
