#!/usr/bin/env bash
# Re-resolves the lockfiles of the test legs under .ci/legs/ to the newest versions their
# package.json ranges allow (all legs, or those named), for a deliberate upgrade: review
# the diff, run the legs, commit. CI never resolves anything itself; it installs these.
# Usage: npm run legs:refresh [-- nest11 typeorm03 ...]
set -euo pipefail
cd "$(dirname "$0")"
legs=("$@")
[ ${#legs[@]} -gt 0 ] || legs=(*/)
for leg in "${legs[@]}"; do
  leg=${leg%/}
  [ -f "$leg/package.json" ] || { echo "no leg named $leg under .ci/legs" >&2; exit 1; }
  echo "=== $leg"
  rm -f "$leg/package-lock.json"
  (cd "$leg" && npm install --package-lock-only --no-audit --no-fund)
  node -e '
    const lock = require(process.argv[1]);
    const direct = Object.keys({ ...lock.packages[""].dependencies, ...lock.packages[""].devDependencies });
    for (const name of direct) console.log(`  ${name} ${lock.packages["node_modules/" + name]?.version}`);
  ' "$PWD/$leg/package-lock.json"
done
