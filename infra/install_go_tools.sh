#!/usr/bin/env bash
# Builds the Go-based dev/test tools Medusa needs, from pinned sources, with the
# local Go toolchain (only package registries are reachable here, so prebuilt
# release binaries cannot be downloaded):
#
#   $MEDUSA_CACHE_DIR/bin/jaeger            Jaeger v2 all-in-one (config: infra/jaeger/config.yaml)
#   $MEDUSA_CACHE_DIR/bin/toxiproxy-server  Toxiproxy fault-injection proxy
#   $MEDUSA_CACHE_DIR/bin/toxiproxy-cli     Toxiproxy command-line client
#
# Idempotent: each tool has a stamp file holding its pin; when the stamp matches
# and the binary exists the tool is skipped without invoking go at all.
# Usage: infra/install_go_tools.sh [--force]
#   --force  rebuild even if the stamps match
# MEDUSA_CACHE_DIR defaults to <repo>/.cache (git-ignored).
set -euo pipefail

# ---- pins ------------------------------------------------------------------
# Jaeger publishes each release under two tags on one commit: v1.x (the old
# line) and v2.x. Only the v1.x tags resolve as Go module versions (the module
# path has no /v2), so v1.76.0 is how we name the v2.13.0 release commit; it is
# the last dual-tagged release (v1 reached end of life after it). Arbitrary
# commits/pseudo-versions are not served by the module proxy we can reach, so a
# real tag is the only reproducible pin. Bumping: later v2-only releases have no
# module-resolvable tag, so they would need a pseudo-version the proxy serves.
JAEGER_MODULE=github.com/jaegertracing/jaeger
JAEGER_MODULE_VERSION=v1.76.0
JAEGER_RELEASE=v2.13.0
JAEGER_COMMIT=63b27e1810a710ac54dc4522da0538e540bdc545
JAEGER_COMMIT_DATE=2025-12-03T16:07:08Z

TOXIPROXY_MODULE=github.com/Shopify/toxiproxy/v2
TOXIPROXY_VERSION=v2.12.0

# ---- locations -------------------------------------------------------------
REPO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CACHE_DIR="${MEDUSA_CACHE_DIR:-$REPO_DIR/.cache}"
BIN_DIR="$CACHE_DIR/bin"
STAMP_DIR="$BIN_DIR/.stamps"

FORCE=0
case "${1:-}" in
  --force) FORCE=1 ;;
  "") ;;
  *) echo "usage: $0 [--force]" >&2; exit 2 ;;
esac

JAEGER_PIN="jaeger $JAEGER_RELEASE module=$JAEGER_MODULE@$JAEGER_MODULE_VERSION commit=$JAEGER_COMMIT"
TOXIPROXY_PIN="toxiproxy $TOXIPROXY_VERSION module=$TOXIPROXY_MODULE@$TOXIPROXY_VERSION"

log() { echo "[install] $*"; }

# A tool is up to date when its stamp holds exactly the current pin and every
# binary it provides is present and executable. Pure bash: keeps reruns fast.
is_current() { # stamp-name pin binary...
  local stamp="$STAMP_DIR/$1" pin="$2"; shift 2
  [[ $FORCE -eq 0 && -f "$stamp" && "$(<"$stamp")" == "$pin" ]] || return 1
  local b
  for b in "$@"; do [[ -x "$BIN_DIR/$b" ]] || return 1; done
}

jaeger_current() { is_current jaeger "$JAEGER_PIN" jaeger; }
toxiproxy_current() { is_current toxiproxy "$TOXIPROXY_PIN" toxiproxy-server toxiproxy-cli; }

# Fast path: everything cached -> no go, no lock, no subprocess-heavy work.
if jaeger_current && toxiproxy_current; then
  log "jaeger $JAEGER_RELEASE: cached"
  log "toxiproxy $TOXIPROXY_VERSION: cached"
  exit 0
fi

command -v go >/dev/null 2>&1 || { echo "[install] error: 'go' not found on PATH" >&2; exit 1; }
mkdir -p "$BIN_DIR" "$STAMP_DIR"

# Serialise concurrent runs (e.g. parallel test workers) so they do not build
# the same thing twice or clobber each other's output.
exec 9>"$BIN_DIR/.install.lock"
flock 9

# Build in a private staging dir and move finished binaries into place, so a
# failed or interrupted build never leaves a half-written binary in bin/.
STAGE="$(mktemp -d "$CACHE_DIR/.go-build.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT

# Deterministic build environment: static binaries (no C compiler needed),
# no surrounding go.work, no VCS stamping, user GOFLAGS cannot interfere.
export CGO_ENABLED=0 GOWORK=off GOFLAGS=-buildvcs=false

install_jaeger() {
  if jaeger_current; then log "jaeger $JAEGER_RELEASE: cached"; return; fi
  log "jaeger $JAEGER_RELEASE ($JAEGER_MODULE@$JAEGER_MODULE_VERSION): building (takes a few minutes the first time)"
  local start=$SECONDS dir
  # `go install $JAEGER_MODULE/cmd/jaeger@version` is refused because Jaeger's
  # go.mod has a replace directive. So fetch the module (checksum-verified via
  # go.sum/sumdb) and build it as the main module from the module cache, where
  # the replace applies. -mod=readonly: never touch the read-only cache copy.
  (cd "$STAGE" && go mod download "$JAEGER_MODULE@$JAEGER_MODULE_VERSION")
  dir="$(cd "$STAGE" && go list -m -f '{{.Dir}}' "$JAEGER_MODULE@$JAEGER_MODULE_VERSION")"
  [[ -n "$dir" && -f "$dir/go.mod" ]] || { echo "[install] error: jaeger module dir not found" >&2; exit 1; }
  # Version ldflags as the upstream Makefile sets them, so `jaeger version`
  # and the build_info metric report the release rather than being empty.
  local vpkg="$JAEGER_MODULE/internal/version"
  (cd "$dir" && GOBIN="$STAGE/jaeger-bin" go install -mod=readonly -trimpath \
    -ldflags "-s -w -X $vpkg.commitSHA=$JAEGER_COMMIT -X $vpkg.latestVersion=$JAEGER_RELEASE -X $vpkg.date=$JAEGER_COMMIT_DATE" \
    ./cmd/jaeger)
  "$STAGE/jaeger-bin/jaeger" version >/dev/null 2>&1 || { echo "[install] error: built jaeger does not run" >&2; exit 1; }
  mv -f "$STAGE/jaeger-bin/jaeger" "$BIN_DIR/jaeger"
  printf '%s\n' "$JAEGER_PIN" >"$STAMP_DIR/jaeger"
  log "jaeger $JAEGER_RELEASE: installed $BIN_DIR/jaeger ($((SECONDS - start))s)"
}

install_toxiproxy() {
  if toxiproxy_current; then log "toxiproxy $TOXIPROXY_VERSION: cached"; return; fi
  log "toxiproxy $TOXIPROXY_VERSION: building (takes a minute the first time)"
  local start=$SECONDS
  # Plain `go install pkg@version` works here. It names the binaries after
  # their package dirs (server, cli), so install into staging and rename to
  # the upstream release names. Version ldflag as in upstream's goreleaser.
  (cd "$STAGE" && GOBIN="$STAGE/toxiproxy-bin" go install -trimpath \
    -ldflags "-s -w -X $TOXIPROXY_MODULE.Version=$TOXIPROXY_VERSION" \
    "$TOXIPROXY_MODULE/cmd/server@$TOXIPROXY_VERSION" \
    "$TOXIPROXY_MODULE/cmd/cli@$TOXIPROXY_VERSION")
  "$STAGE/toxiproxy-bin/server" -version >/dev/null 2>&1 || { echo "[install] error: built toxiproxy-server does not run" >&2; exit 1; }
  mv -f "$STAGE/toxiproxy-bin/server" "$BIN_DIR/toxiproxy-server"
  mv -f "$STAGE/toxiproxy-bin/cli" "$BIN_DIR/toxiproxy-cli"
  printf '%s\n' "$TOXIPROXY_PIN" >"$STAMP_DIR/toxiproxy"
  log "toxiproxy $TOXIPROXY_VERSION: installed $BIN_DIR/toxiproxy-server, $BIN_DIR/toxiproxy-cli ($((SECONDS - start))s)"
}

install_jaeger
install_toxiproxy
