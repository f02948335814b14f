#!/usr/bin/env bash
# Install a pinned Apache Kafka 4.x broker (+ kafka-tools, + log4j2 binding)
# from Maven Central into $MEDUSA_CACHE_DIR/kafka/<version>/libs/.
# Idempotent: a stamp file makes later runs a no-op ("cached").
# Run with: java -cp "$MEDUSA_CACHE_DIR/kafka/<version>/libs/*" kafka.Kafka server.properties
set -euo pipefail

INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "$INFRA_DIR")"
CACHE_DIR="${MEDUSA_CACHE_DIR:-$REPO_DIR/.cache}"
POM="$INFRA_DIR/maven/kafka/pom.xml"

# The pom is the single source of truth for the pinned version.
VERSION="$(sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM")"
DEST="$CACHE_DIR/kafka/$VERSION"
STAMP="$DEST/.installed"
# Stamp holds the pom's hash, so editing the pom (e.g. log4j bump) reinstalls.
POM_SUM="$(sha256sum "$POM" | cut -d' ' -f1)"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$POM_SUM" ]]; then
  echo "[install] kafka $VERSION: cached ($DEST/libs)"
  exit 0
fi

command -v mvn >/dev/null || { echo "[install] kafka: mvn not found" >&2; exit 1; }

echo "[install] kafka $VERSION: fetching jars from Maven Central"
mkdir -p "$CACHE_DIR/kafka"
# Copy into a temp dir and move into place at the end, so an interrupted run
# never leaves a half-filled libs/ that looks complete.
TMP="$(mktemp -d "$CACHE_DIR/kafka/.tmp.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
# (sed: Debian's mvn 3.8 prints stray ANSI resets even with -B -q.)
mvn -B -q -f "$POM" dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$TMP/libs" 2>&1 | sed 's/\x1b\[[0-9;]*m//g'

for jar in "kafka_2.13-$VERSION.jar" "kafka-tools-$VERSION.jar" log4j-slf4j-impl-*.jar; do
  compgen -G "$TMP/libs/$jar" >/dev/null \
    || { echo "[install] kafka $VERSION: $jar missing after download" >&2; exit 1; }
done

rm -rf "$DEST"
mkdir -p "$DEST"
mv "$TMP/libs" "$DEST/libs"
echo "$POM_SUM" > "$STAMP"
echo "[install] kafka $VERSION: installed $(ls "$DEST/libs" | wc -l) jars in $DEST/libs"
