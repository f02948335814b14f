#!/usr/bin/env bash
# Checkpoints on an S3-compatible object store, both sides, pinned, from Maven Central:
#  - the server: s3proxy with its local "filesystem" backend, into
#    $MEDUSA_CACHE_DIR/s3proxy/<version>/libs/ (services/medusa/stack/s3.py runs it:
#    java -cp "libs/*" org.gaul.s3proxy.Main --properties <file>);
#  - Spark's client: hadoop-aws of the Hadoop version pyspark ships and the AWS SDK v2
#    modules it uses, into $MEDUSA_CACHE_DIR/s3a-jars/<hadoop version>/ (handed to a
#    node's Spark with spark.jars when its checkpoints are on s3a://), leaving out the
#    jars pyspark already ships, as infra/install_spark_jars.sh does.
# Idempotent: stamp files holding the poms' hashes make later runs a no-op ("cached").
set -euo pipefail

INFRA_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO_DIR="$(dirname "$INFRA_DIR")"
CACHE_DIR="${MEDUSA_CACHE_DIR:-$REPO_DIR/.cache}"
PYTHON="${MEDUSA_PYTHON:-$REPO_DIR/.venv/bin/python}"
SERVER_POM="$INFRA_DIR/maven/s3proxy/pom.xml"
CLIENT_POM="$INFRA_DIR/maven/s3a/pom.xml"

pinned() { sed -n "s:.*<$1>\(.*\)</$1>.*:\1:p" "$2"; }

# mvn copy-dependencies of a pom into a fresh folder. (sed: Debian's mvn 3.8 prints
# stray ANSI resets even with -B -q.)
fetch() {
  mvn -B -q -s "$INFRA_DIR/maven/settings.xml" -f "$1" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$2" 2>&1 | sed 's/\x1b\[[0-9;]*m//g'
}

command -v mvn >/dev/null || { echo "[install] s3: mvn not found" >&2; exit 1; }

# --- the server -------------------------------------------------------------------------
VERSION="$(pinned s3proxy.version "$SERVER_POM")"
DEST="$CACHE_DIR/s3proxy/$VERSION"
SUM="$(sha256sum "$SERVER_POM" | cut -d' ' -f1)"
if [[ -f "$DEST/.installed" && "$(cat "$DEST/.installed")" == "$SUM" ]]; then
  echo "[install] s3proxy $VERSION: cached ($DEST/libs)"
else
  echo "[install] s3proxy $VERSION: fetching jars from Maven Central"
  mkdir -p "$CACHE_DIR/s3proxy"
  # Filled aside and moved into place at the end: an interrupted run leaves no half.
  TMP="$(mktemp -d "$CACHE_DIR/s3proxy/.tmp.XXXXXX")"
  trap 'rm -rf "$TMP"' EXIT
  fetch "$SERVER_POM" "$TMP/libs"
  [[ -f "$TMP/libs/s3proxy-$VERSION.jar" ]] \
    || { echo "[install] s3proxy $VERSION: s3proxy-$VERSION.jar missing after download" >&2; exit 1; }
  rm -rf "$DEST"
  mkdir -p "$DEST"
  mv "$TMP/libs" "$DEST/libs"
  echo "$SUM" > "$DEST/.installed"
  rm -rf "$TMP"
  trap - EXIT
  echo "[install] s3proxy $VERSION: installed $(ls "$DEST/libs" | wc -l) jars" \
    "($(du -sh "$DEST/libs" | cut -f1)) in $DEST/libs"
fi

# --- Spark's S3A client -----------------------------------------------------------------
HADOOP="$(pinned hadoop.version "$CLIENT_POM")"
PYSPARK_JARS="$("$PYTHON" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
[[ -f "$PYSPARK_JARS/hadoop-client-api-$HADOOP.jar" ]] \
  || { echo "[install] s3a: $CLIENT_POM pins Hadoop $HADOOP, but pyspark ships" \
         "$(cd "$PYSPARK_JARS" && ls hadoop-client-api-*.jar)" >&2; exit 1; }
DEST="$CACHE_DIR/s3a-jars/$HADOOP"
SUM="$(sha256sum "$CLIENT_POM" | cut -d' ' -f1)"
if [[ -f "$DEST/.installed" && "$(cat "$DEST/.installed")" == "$SUM" ]]; then
  echo "[install] s3a client (hadoop-aws $HADOOP): cached ($DEST)"
  exit 0
fi
echo "[install] s3a client (hadoop-aws $HADOOP): fetching jars from Maven Central"
mkdir -p "$CACHE_DIR/s3a-jars"
TMP="$(mktemp -d "$CACHE_DIR/s3a-jars/.tmp.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
fetch "$CLIENT_POM" "$TMP/all"
mkdir -p "$TMP/jars"
# Keep only the jars pyspark does not ship: a second copy (netty, httpclient, commons-*)
# in another version would split Spark's classpath.
for jar in "$TMP/all"/*.jar; do
  name="$(basename "$jar")"
  artifact="${name%-[0-9]*}"
  if compgen -G "$PYSPARK_JARS/${artifact}-[0-9]*.jar" >/dev/null; then
    continue
  fi
  cp "$jar" "$TMP/jars/"
done
[[ -f "$TMP/jars/hadoop-aws-$HADOOP.jar" ]] \
  || { echo "[install] s3a: hadoop-aws-$HADOOP.jar missing after download" >&2; exit 1; }
rm -rf "$DEST"
mv "$TMP/jars" "$DEST"
echo "$SUM" > "$DEST/.installed"
echo "[install] s3a client (hadoop-aws $HADOOP): $(ls "$DEST"/*.jar | wc -l) jars" \
  "($(du -sh "$DEST" | cut -f1)) in $DEST"
