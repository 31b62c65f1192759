#!/usr/bin/env bash
# Installs one test leg from its committed lockfile: copies .ci/legs/<leg>/{package.json,
# package-lock.json,.npmrc} into <target>/ and runs `npm ci` there. Skipped when <target>
# already holds an install of exactly that lockfile, so a second run costs nothing.
# Usage: bash .ci/legs/install.sh <leg> <target dir>
set -euo pipefail
leg=$1 target=$2
source_dir="$(cd "$(dirname "$0")" && pwd)/$leg"
[ -f "$source_dir/package-lock.json" ] || { echo "no lockfile for the $leg leg at $source_dir" >&2; exit 1; }
mkdir -p "$target"
stamp="$target/.installed-lock"
if [ -f "$stamp" ] && [ -d "$target/node_modules" ] && cmp -s "$stamp" "$source_dir/package-lock.json"; then
  echo "$leg leg: already installed from its lockfile"
  exit 0
fi
rm -f "$stamp"
cp "$source_dir/package.json" "$source_dir/package-lock.json" "$target/"
[ -f "$source_dir/.npmrc" ] && cp "$source_dir/.npmrc" "$target/"
(cd "$target" && npm ci --no-audit --no-fund)
cp "$source_dir/package-lock.json" "$stamp"
