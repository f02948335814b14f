#!/usr/bin/env bash
# Fetches the Compose Specification's JSON schema (as docker compose itself validates
# with it) from the Go module proxy, for the check of docker-compose.yml without a
# Docker engine (tests/unit/test_compose.py).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cache="${MEDUSA_CACHE_DIR:-$repo/.cache}"
module="github.com/compose-spec/compose-go/v2"
version="v2.16.2"
dest="$cache/compose/compose-spec-$version.json"

if [[ -f "$dest" ]]; then
  echo "[install] compose-spec schema $version: cached"
  exit 0
fi
command -v go >/dev/null || { echo "[install] error: need Go to fetch the compose-spec schema" >&2; exit 1; }
staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
dir="$(cd "$staging" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "$module@$version" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -f "$dir/schema/compose-spec.json" ]] || { echo "[install] error: no schema in $module@$version" >&2; exit 1; }
mkdir -p "$(dirname "$dest")"
cp "$dir/schema/compose-spec.json" "$dest.tmp"
mv -f "$dest.tmp" "$dest"
echo "[install] compose-spec schema $version: installed in $dest"
