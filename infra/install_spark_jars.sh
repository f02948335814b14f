#!/usr/bin/env bash
# Fetches Spark's Kafka and Avro connectors matching the installed pyspark into the cache.
# spark.jars.packages would bypass the Maven settings, so Spark gets plain jar paths instead.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cache="${MEDUSA_CACHE_DIR:-$repo/.cache}"
python="${MEDUSA_PYTHON:-$repo/.venv/bin/python}"

spark_version="$("$python" -c 'import pyspark; print(pyspark.__version__)')"
pyspark_jars="$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
dest="$cache/spark-jars/$spark_version"
stamp="$dest/.installed"

if [[ -f "$stamp" ]]; then
  echo "[install] spark connectors $spark_version: cached"
  exit 0
fi

echo "[install] spark connectors $spark_version: fetching jars from Maven Central"
staging="$(mktemp -d)"
trap 'rm -rf "$staging"' EXIT
mvn -B -q -s "$here/maven/settings.xml" -f "$here/maven/spark-connectors/pom.xml" \
  -Dspark.version="$spark_version" \
  dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory="$staging"

# Keep only jars pyspark does not already ship: a second copy of e.g. snappy or
# commons-lang3 in another version would split the classpath.
mkdir -p "$dest"
rm -f "$dest"/*.jar
for jar in "$staging"/*.jar; do
  name="$(basename "$jar")"
  artifact="${name%-[0-9]*}"
  if compgen -G "$pyspark_jars/${artifact}-[0-9]*.jar" > /dev/null; then
    continue
  fi
  cp "$jar" "$dest/"
done
date -u +%FT%TZ > "$stamp"
echo "[install] spark connectors $spark_version: $(ls "$dest"/*.jar | wc -l) jars in $dest"
