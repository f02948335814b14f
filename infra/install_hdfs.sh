#!/usr/bin/env bash
# Install a pinned Apache Hadoop HDFS server (NameNode + DataNode, + reload4j logging)
# from Maven Central into $MEDUSA_CACHE_DIR/hadoop/<version>/libs/, for Spark
# checkpoints on a local HDFS (services/medusa/stack/hdfs.py runs it).
# Idempotent: a stamp file makes later runs a no-op ("cached").
# Run with: java -cp "<conf dir>:$MEDUSA_CACHE_DIR/hadoop/<version>/libs/*" \
#   org.apache.hadoop.hdfs.server.namenode.NameNode   (or ...datanode.DataNode)
set -euo pipefail

INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "$INFRA_DIR")"
CACHE_DIR="${MEDUSA_CACHE_DIR:-$REPO_DIR/.cache}"
POM="$INFRA_DIR/maven/hdfs/pom.xml"

# The pom is the single source of truth for the pinned version.
VERSION="$(sed -n 's:.*<hadoop.version>\(.*\)</hadoop.version>.*:\1:p' "$POM")"
DEST="$CACHE_DIR/hadoop/$VERSION"
STAMP="$DEST/.installed"
# Stamp holds the pom's hash, so editing the pom (e.g. an exclusion) reinstalls.
POM_SUM="$(sha256sum "$POM" | cut -d' ' -f1)"

if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$POM_SUM" ]]; then
  echo "[install] hdfs $VERSION: cached ($DEST/libs)"
  exit 0
fi

command -v mvn >/dev/null || { echo "[install] hdfs: mvn not found" >&2; exit 1; }

echo "[install] hdfs $VERSION: fetching jars from Maven Central"
mkdir -p "$CACHE_DIR/hadoop"
# Copy into a temp dir and move into place at the end, so an interrupted run
# never leaves a half-filled libs/ that looks complete.
TMP="$(mktemp -d "$CACHE_DIR/hadoop/.tmp.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
# settings.xml routes every repository to Central (Hadoop's poms declare others).
# (sed: Debian's mvn 3.8 prints stray ANSI resets even with -B -q.)
mvn -B -q -s "$INFRA_DIR/maven/settings.xml" -f "$POM" dependency:copy-dependencies \
  -DincludeScope=runtime -DoutputDirectory="$TMP/libs" 2>&1 | sed 's/\x1b\[[0-9;]*m//g'

for jar in "hadoop-hdfs-$VERSION.jar" "hadoop-common-$VERSION.jar" slf4j-reload4j-*.jar; do
  compgen -G "$TMP/libs/$jar" >/dev/null \
    || { echo "[install] hdfs $VERSION: $jar missing after download" >&2; exit 1; }
done

rm -rf "$DEST"
mkdir -p "$DEST"
mv "$TMP/libs" "$DEST/libs"
echo "$POM_SUM" > "$STAMP"
echo "[install] hdfs $VERSION: installed $(ls "$DEST/libs" | wc -l) jars" \
  "($(du -sh "$DEST/libs" | cut -f1)) in $DEST/libs"
