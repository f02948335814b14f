#!/usr/bin/env bash
# Installs every component the local federation runs, pinned, into the cache
# ($MEDUSA_CACHE_DIR, default <repo>/.cache). Shared by `make setup`, `medusa install`
# and the container image. Each step is idempotent and says "cached" when done before.
#
# The Go tools (Jaeger, toxiproxy) compile for minutes on a fresh machine while the
# other steps mostly download, so they build side by side.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${MEDUSA_CACHE_DIR:-$here/../.cache}"
mkdir -p "$cache"
go_log="$cache/go-tools.log"

"$here/install_go_tools.sh" >"$go_log" 2>&1 &
go_tools=$!
trap 'kill "$go_tools" 2>/dev/null || true' EXIT
"$here/install_kafka.sh"
"$here/install_registry.sh"
"$here/install_spark_jars.sh"
"$here/install_spark_extensions.sh"
"$here/install_hdfs.sh"
"$here/install_s3.sh"
"$here/install_compose_schema.sh"
if ! grep -q "cached" "$go_log" 2>/dev/null; then
  echo "[install] jaeger and toxiproxy: waiting for their build (a few minutes the first time)"
fi
status=0
wait "$go_tools" || status=$?
trap - EXIT
grep '^\[install\]' "$go_log" || true
if [[ $status -ne 0 ]]; then
  echo "[install] error: building the Go tools failed; the end of $go_log:" >&2
  tail -n 30 "$go_log" >&2
  exit "$status"
fi
