#!/usr/bin/env bash
# Builds medusa-base:<suite> (a minimal Debian root file system, from Debian's package
# mirror with debootstrap) and imports it into the Docker engine, for machines that
# reach no image registry. The root file system's tarball is cached, so a later run only
# imports it; an image already in the engine is kept.
#   infra/docker/base_image.sh bookworm|trixie
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${MEDUSA_CACHE_DIR:-$here/../../.cache}/docker"
suite="${1:?usage: base_image.sh SUITE (bookworm or trixie)}"
mirror="${MEDUSA_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
image="medusa-base:$suite"
tarball="$cache/$suite-minbase.tar"

if docker image inspect "$image" >/dev/null 2>&1; then
  echo "[compose] base image $image: present"
  exit 0
fi
mkdir -p "$cache"
if [[ ! -f "$tarball" ]]; then
  if ! command -v debootstrap >/dev/null; then
    [[ $(id -u) -eq 0 ]] || {
      echo "[compose] base image $image: debootstrap is missing, and installing it needs root" >&2
      exit 1; }
    echo "[compose] base image $image: installing Debian's debootstrap (apt-get)"
    apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap >/dev/null
  fi
  echo "[compose] base image $image: debootstrap --variant=minbase $suite from $mirror"
  root="$(mktemp -d "$cache/.rootfs.XXXXXX")"
  trap 'rm -rf "$root"' EXIT
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$cache/debootstrap-$suite.log" 2>&1 || {
    echo "[compose] debootstrap failed; the end of $cache/debootstrap-$suite.log:" >&2
    tail -n 20 "$cache/debootstrap-$suite.log" >&2
    exit 1; }
  # The package lists and caches are not part of the image.
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
fi
docker import --change 'CMD ["bash"]' "$tarball" "$image" >/dev/null
echo "[compose] base image $image: imported from $tarball"
