#!/usr/bin/env bash
# The compose deployment on this machine, from nothing:
#   infra/compose.sh engine   a Docker engine and the compose plugin (installs what is missing)
#   infra/compose.sh images   the base images (debootstrap) and the project's images
#   infra/compose.sh up       all of the above, then `docker compose up --wait`
#   infra/compose.sh down     `docker compose down` (add -v to drop the volumes)
# Each step says what it does and skips what is there already. Installing or starting the
# engine needs root; with an engine and compose already running, nothing here does.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cache="${MEDUSA_CACHE_DIR:-$repo/.cache}"
run="${MEDUSA_RUN_DIR:-$repo/.run}"
COMPOSE_VERSION=v2.40.3
COMPOSE_MODULE=github.com/docker/compose/v2
export COMPOSE_BAKE=false DOCKER_BUILDKIT=0  # the engine's own builder: no buildx plugin here

say() { echo "[compose] $*"; }
fail() { echo "[compose] error: $*" >&2; exit 1; }

engine() {
  if docker info >/dev/null 2>&1; then
    say "Docker engine: running"
  else
    [[ $(id -u) -eq 0 ]] || fail "no Docker engine answers, and starting one needs root"
    if ! command -v dockerd >/dev/null; then
      say "Docker engine: installing Debian's docker.io (apt-get)"
      apt-get update -q >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io >/dev/null
    fi
    mkdir -p "$run"
    say "Docker engine: starting dockerd (log: $run/dockerd.log)"
    # No systemd here: dockerd runs in the background, with cgroupfs and overlay2.
    nohup dockerd --host unix:///var/run/docker.sock --storage-driver overlay2 \
      --exec-opt native.cgroupdriver=cgroupfs >"$run/dockerd.log" 2>&1 &
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || fail "dockerd did not answer within 60 s; see $run/dockerd.log"
  fi
  if docker compose version >/dev/null 2>&1; then
    say "compose: $(docker compose version --short)"
    return
  fi
  local plugin="$cache/bin/docker-compose"
  if [[ ! -x $plugin ]]; then
    command -v go >/dev/null || fail "the compose plugin is missing and there is no Go to build it"
    say "compose: building $COMPOSE_MODULE $COMPOSE_VERSION from the Go module proxy (minutes, once)"
    local stage
    stage="$(mktemp -d "$cache/.compose-build.XXXXXX")"
    # Its go.mod has exclude directives, so `go install module/cmd@version` is refused:
    # fetch the module (checksum-verified) and build it as the main module, in place.
    local dir
    (cd "$stage" && go mod download "$COMPOSE_MODULE@$COMPOSE_VERSION")
    dir="$(cd "$stage" && go list -m -f '{{.Dir}}' "$COMPOSE_MODULE@$COMPOSE_VERSION")"
    (cd "$dir" && CGO_ENABLED=0 GOWORK=off GOFLAGS=-buildvcs=false GOBIN="$stage/bin" \
      go install -mod=readonly -trimpath \
      -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
      ./cmd)
    mkdir -p "$cache/bin"
    mv "$stage/bin/cmd" "$plugin"
    rm -rf "$stage"
  fi
  # Where the Docker CLI looks for a user's plugins.
  mkdir -p "$HOME/.docker/cli-plugins"
  ln -sf "$plugin" "$HOME/.docker/cli-plugins/docker-compose"
  say "compose: $(docker compose version --short) (plugin $plugin)"
}

images() {
  engine
  bash "$here/docker/base_image.sh" bookworm
  bash "$here/docker/base_image.sh" trixie
  # The network's own certificate authorities (a TLS-inspecting proxy, say), so the
  # installers inside the build reach the package registries as the machine does.
  local certs="$here/docker/ca-certificates"
  find "$certs" -name '*.crt' -delete
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cp /usr/local/share/ca-certificates/*.crt "$certs/"
  fi
  say "images: building medusa:local and medusa-registry:local (the first build installs everything: about 15 minutes)"
  local started=$SECONDS
  (cd "$repo" && docker compose build)
  say "images: built in $((SECONDS - started)) s"
}

up() {
  images
  say "starting the deployment (health-ordered; docker compose ps shows it)"
  (cd "$repo" && docker compose up -d --wait --wait-timeout 600)
  (cd "$repo" && docker compose ps --format 'table {{.Service}}\t{{.Status}}\t{{.Ports}}')
  say "catalog http://127.0.0.1:${CATALOG_PORT:-18090}/docs, Jaeger http://127.0.0.1:${JAEGER_UI_PORT:-16686}"
}

down() {
  (cd "$repo" && docker compose down "$@")
}

case "${1:-}" in
  engine) engine ;;
  images) images ;;
  up) up ;;
  down) shift; down "$@" ;;
  *) echo "usage: $0 engine|images|up|down [-v]" >&2; exit 2 ;;
esac
