# The schema registry (Apicurio Registry 3, which needs Java 21), installed by the same
# script as `make setup` (infra/install_registry.sh, from Maven Central).
# REGISTRY_BASE_IMAGE: a Debian trixie root file system (Java 21 is a trixie package).
# `make compose-up` builds one here with debootstrap; with a registry, `debian:trixie-slim`.
# Build context: the repository root.
ARG REGISTRY_BASE_IMAGE=medusa-base:trixie

FROM ${REGISTRY_BASE_IMAGE} AS build
ENV DEBIAN_FRONTEND=noninteractive MEDUSA_CACHE_DIR=/opt/medusa/cache
COPY infra/docker/ca-certificates/ /usr/local/share/ca-certificates/
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates maven openjdk-21-jdk-headless \
 && update-ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/medusa/src
COPY infra infra
RUN bash infra/install_registry.sh && rm -rf /root/.m2

FROM ${REGISTRY_BASE_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends curl openjdk-21-jre-headless \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/medusa /opt/medusa
RUN useradd --system --uid 1000 --gid 0 --home-dir /opt/medusa medusa
USER medusa
WORKDIR /opt/medusa/src
# The same settings as the local registry (infra/registry/registry.properties), then the
# deployment's own (QUARKUS_CONFIG_LOCATIONS adds its Kafka login); reachable only on the
# deployment's network.
ENTRYPOINT ["bash", "-c", "exec java -Xmx512m -Dquarkus.config.locations=/opt/medusa/src/infra/registry/registry.properties${QUARKUS_CONFIG_LOCATIONS:+,$QUARKUS_CONFIG_LOCATIONS} -Dquarkus.http.host=0.0.0.0 -Dquarkus.management.host=0.0.0.0 -Dapicurio.kafkasql.bootstrap.servers=${APICURIO_KAFKASQL_BOOTSTRAP_SERVERS} -jar /opt/medusa/cache/apicurio/*/quarkus-run.jar"]
