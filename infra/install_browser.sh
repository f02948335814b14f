#!/usr/bin/env bash
# Installs the browser the browser tests drive: Debian's chromium (/usr/bin/chromium)
# and a font so pages render text. Playwright (the `playwright` package of the dev
# extras) drives it through executable_path="/usr/bin/chromium"; its own browser
# download (`playwright install`) is not used, since only package registries are
# reachable here.
#
# The version is Debian's: bookworm-security replaces chromium with each upstream
# security release and drops the previous one, so an exact apt pin would stop
# installing within weeks. Playwright's pin in pyproject.toml is the one whose bundled
# Chromium matches bookworm's at the time of pinning (1.64.1: Chromium 156); a newer
# Debian chromium keeps working with it (the DevTools protocol stays compatible).
#
# Idempotent: when /usr/bin/chromium and the font are there it runs neither apt nor
# dpkg, only prints the version. Needs root (apt-get) only when something is missing.
# Used by `make test`.
set -euo pipefail

PACKAGES=(chromium fonts-dejavu-core)
CHROMIUM=/usr/bin/chromium
FONT=/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf

log() { echo "[install] $*"; }

version() { "$CHROMIUM" --version 2>/dev/null | head -n1; }

# One install at a time: `make test` may have started one in the background already.
exec 9>"${TMPDIR:-/tmp}/medusa-browser-install.lock"
flock 9

if [[ -x "$CHROMIUM" && -f "$FONT" ]]; then
  log "browser: cached ($(version))"
  exit 0
fi

if [[ $(id -u) -ne 0 ]]; then
  {
    echo "[install] error: the browser tests need Debian's chromium and a font, and installing them needs root."
    echo "[install] run:   sudo $(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
    echo "[install] or:    sudo apt-get install -y --no-install-recommends ${PACKAGES[*]}"
  } >&2
  exit 1
fi
command -v apt-get >/dev/null || { echo "[install] error: apt-get not found (Debian/Ubuntu only); install ${PACKAGES[*]} by hand" >&2; exit 1; }

export DEBIAN_FRONTEND=noninteractive
# Wait for another apt/dpkg run (e.g. a parallel setup) instead of failing at once.
apt_get() { apt-get -o DPkg::Lock::Timeout=300 "$@"; }
install() { apt_get install -y -q --no-install-recommends "${PACKAGES[@]}"; }

log "browser: installing ${PACKAGES[*]} with apt-get (about 300 MB)"
# Try with the package lists already on the machine first; refresh them only when
# that fails (no lists yet, or ones naming versions the mirror has since dropped).
if ! install; then
  log "browser: install failed with the current package lists; running apt-get update and retrying"
  apt_get update -q
  install
fi

[[ -x "$CHROMIUM" ]] || { echo "[install] error: $CHROMIUM missing after installing chromium" >&2; exit 1; }
log "browser: installed ($(version))"
