#!/usr/bin/env bash
# Install a pinned Apicurio Registry 3.x server (Quarkus fast-jar distribution,
# io.apicurio:apicurio-registry-app:<v>:tar.gz:all) from Maven Central, unpacked
# into $MEDUSA_CACHE_DIR/apicurio/<version>/ (quarkus-run.jar at its top).
# Idempotent: a stamp file makes later runs a no-op ("cached").
set -euo pipefail

INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "$INFRA_DIR")"
CACHE_DIR="${MEDUSA_CACHE_DIR:-$REPO_DIR/.cache}"
POM="$INFRA_DIR/maven/registry/pom.xml"

# The pom is the single source of truth for the pinned version.
VERSION="$(sed -n 's:.*<apicurio.version>\(.*\)</apicurio.version>.*:\1:p' "$POM")"
DEST="$CACHE_DIR/apicurio/$VERSION"
STAMP="$DEST/.installed"
POM_SUM="$(sha256sum "$POM" | cut -d' ' -f1)"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$POM_SUM" ]]; then
  echo "[install] apicurio registry $VERSION: cached ($DEST)"
  exit 0
fi

command -v mvn >/dev/null || { echo "[install] apicurio: mvn not found" >&2; exit 1; }

echo "[install] apicurio registry $VERSION: fetching distribution (~160 MB) from Maven Central"
mkdir -p "$CACHE_DIR/apicurio"
# Download and unpack in a temp dir, move into place only when complete.
TMP="$(mktemp -d "$CACHE_DIR/apicurio/.tmp.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
# (sed: Debian's mvn 3.8 prints stray ANSI resets even with -B -q.)
mvn -B -q -f "$POM" dependency:copy -Dregistry.download.dir="$TMP/download" 2>&1 \
  | sed 's/\x1b\[[0-9;]*m//g'

echo "[install] apicurio registry $VERSION: unpacking"
mkdir -p "$TMP/app"
tar -xzf "$TMP/download/apicurio-registry-app.tar.gz" -C "$TMP/app"
[[ -f "$TMP/app/quarkus-run.jar" ]] \
  || { echo "[install] apicurio $VERSION: quarkus-run.jar missing after unpack" >&2; exit 1; }

rm -rf "$DEST"
mv "$TMP/app" "$DEST"
echo "$POM_SUM" > "$STAMP"
echo "[install] apicurio registry $VERSION: installed in $DEST"
# Apicurio 3.x is compiled for Java 21; warn now rather than at first start.
if JAVA_BIN="$("$INFRA_DIR/registry/find_java.sh")"; then
  echo "[install] apicurio registry $VERSION: will run with $JAVA_BIN"
else
  echo "[install] apicurio registry $VERSION: WARNING: needs Java >= 21, none found" >&2
fi
