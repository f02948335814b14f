#!/usr/bin/env bash
# Compiles the project's own Spark classes (spark_apps/jvm) against the installed pyspark's
# jars into the cache; again whenever their sources or pyspark's version change.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cache="${MEDUSA_CACHE_DIR:-$repo/.cache}"
python="${MEDUSA_PYTHON:-$repo/.venv/bin/python}"
sources="$repo/spark_apps/jvm"

spark_version="$("$python" -c 'import pyspark; print(pyspark.__version__)')"
pyspark_jars="$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
dest="$cache/spark-extensions/$spark_version"
jar="$dest/medusa-spark-extensions.jar"
digest="$(cd "$sources" && find . -name '*.java' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)"

if [[ -f "$jar" && "$(cat "$dest/.installed" 2>/dev/null)" == "$digest" ]]; then
  echo "[install] spark extensions: cached"
  exit 0
fi

echo "[install] spark extensions: compiling against pyspark $spark_version"
staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
mapfile -t files < <(find "$sources" -name '*.java' | LC_ALL=C sort)
# The connectors' jars too: the SUnion source reads Kafka with their kafka-clients.
connector_jars="$cache/spark-jars/$spark_version"
javac -nowarn -Xlint:-path --release 17 -cp "$pyspark_jars/*:$connector_jars/*" -d "$staging/classes" "${files[@]}"
mkdir -p "$dest"
jar --create --file "$staging/extensions.jar" -C "$staging/classes" .
mv "$staging/extensions.jar" "$jar"
echo "$digest" > "$dest/.installed"
echo "[install] spark extensions: $jar"
