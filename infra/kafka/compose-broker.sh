#!/usr/bin/env bash
# One Kafka broker of the compose deployment, started in the apache/kafka image in place
# of the image's own start, which formats the storage without SCRAM users:
#   - server.properties from the KAFKA_* environment (KAFKA_FOO_BAR=x gives foo.bar=x);
#   - on the first start, the storage formatted with every principal's SCRAM credential,
#     so every client can authenticate from the start;
#   - the brokers' own login (admin) from kafka_server_jaas.conf.
# The secrets come from the credentials service (`medusa credentials init`), in
# MEDUSA_BROKER_SECRETS. The same script runs a broker outside a container, which is how
# the tests check it (MEDUSA_KAFKA_STORAGE and MEDUSA_KAFKA_START name Kafka's commands).
set -euo pipefail

storage=${MEDUSA_KAFKA_STORAGE:-/opt/kafka/bin/kafka-storage.sh}
start=${MEDUSA_KAFKA_START:-/opt/kafka/bin/kafka-server-start.sh}
secrets=${MEDUSA_BROKER_SECRETS:-/etc/kafka/secrets}
config=${MEDUSA_BROKER_CONFIG:-/tmp/medusa-server.properties}
: "${CLUSTER_ID:?CLUSTER_ID: the cluster id, 22 characters of base64url}"
: "${KAFKA_LOG_DIRS:?KAFKA_LOG_DIRS: where the broker keeps its data}"
for needed in kafka_server_jaas.conf scram-users; do
  if [[ ! -r $secrets/$needed ]]; then
    echo "error: cannot read $secrets/$needed, which the credentials service" \
         "(medusa credentials init) writes" >&2
    exit 1
  fi
done

umask 077
# The launcher's own variables are not broker settings.
not_settings='^KAFKA_(HOME|OPTS|HEAP_OPTS|JVM_PERFORMANCE_OPTS|LOG4J_OPTS|GC_LOG_OPTS|JMX_OPTS|VERSION)='
env | grep -E '^KAFKA_[A-Z0-9_]+=' | grep -Ev "$not_settings" | sort |
  while IFS='=' read -r name value; do
    key=${name#KAFKA_}
    key=${key,,}
    printf '%s=%s\n' "${key//_/.}" "$value"
  done > "$config"

export KAFKA_OPTS="${KAFKA_OPTS:-} -Djava.security.auth.login.config=$secrets/kafka_server_jaas.conf"

if [[ ! -f $KAFKA_LOG_DIRS/meta.properties ]]; then
  scram=()
  while IFS= read -r user; do
    [[ -n $user ]] && scram+=(--add-scram "$user")
  done < "$secrets/scram-users"
  echo "formatting $KAFKA_LOG_DIRS with ${#scram[@]} principals' SCRAM credentials"
  "$storage" format --cluster-id="$CLUSTER_ID" --config "$config" \
    "${scram[@]}"
fi
exec "$start" "$config"
