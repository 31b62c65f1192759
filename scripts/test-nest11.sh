#!/usr/bin/env bash
# Runs the Nest-facing suites on NestJS 11. The Nest 11 packages go to .nest11/ so the
# main node_modules (NestJS 12) stays as the lockfile has it; they are installed from a
# committed lockfile, so a new Nest 11 release cannot change what CI tests overnight.
set -euo pipefail
cd "$(dirname "$0")/.."
# The versions come from .ci/legs/nest11/package-lock.json (see README, Development).
bash .ci/legs/install.sh nest11 .nest11
node -e "console.log('NestJS', require('./.nest11/node_modules/@nestjs/core/package.json').version)"
# With no arguments: every suite that exercises Nest itself (HTTP, messages, guards,
# health, observability, the sample app); stores and protocol suites do not depend on
# the Nest major and run once, in `npm test`.
if [ "$#" -eq 0 ]; then
  set -- test/nest test/messages test/tokens test/terminus test/observability test/reliability/security.spec.ts sample-app
fi
npx jest -c jest.nest11.config.js "$@"
