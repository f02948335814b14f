#!/usr/bin/env bash
# Installs every component the local federation runs, pinned, into the cache
# ($MEDUSA_CACHE_DIR, default <repo>/.cache). Shared by `make setup`, `medusa install`
# and the container image. Each step is idempotent and says "cached" when done before.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
"$here/install_kafka.sh"
"$here/install_registry.sh"
"$here/install_spark_jars.sh"
"$here/install_hdfs.sh"
"$here/install_go_tools.sh"
"$here/install_compose_schema.sh"
