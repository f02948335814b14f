#!/usr/bin/env bash
# Print the path of a `java` able to run Apicurio Registry 3.x (needs Java >= 21;
# the machine's default Java 17 fails with UnsupportedClassVersionError).
# Order: $MEDUSA_REGISTRY_JAVA, $JAVA_HOME, `java` on PATH, /usr/lib/jvm/*.
set -euo pipefail
MIN=21

major() {  # "25.0.3" -> 25 ; "17.0.15" -> 17
  "$1" -XshowSettings:properties -version 2>&1 \
    | sed -n 's/^ *java\.specification\.version = \([0-9]*\).*/\1/p'
}

candidates=()
[[ -n "${MEDUSA_REGISTRY_JAVA:-}" ]] && candidates+=("$MEDUSA_REGISTRY_JAVA")
[[ -n "${JAVA_HOME:-}" ]] && candidates+=("$JAVA_HOME/bin/java")
command -v java >/dev/null && candidates+=("$(command -v java)")
for d in /usr/lib/jvm/*/bin/java; do [[ -x "$d" ]] && candidates+=("$d"); done

for j in "${candidates[@]}"; do
  [[ -x "$j" ]] || continue
  v="$(major "$j" || true)"
  if [[ -n "$v" && "$v" -ge "$MIN" ]]; then echo "$j"; exit 0; fi
done
echo "no Java >= $MIN found (set MEDUSA_REGISTRY_JAVA)" >&2
exit 1
