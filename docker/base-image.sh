#!/bin/sh
# Builds a Debian bookworm base image locally (debootstrap + `docker import`) for machines that cannot
# pull the registry's python:3.11-slim (the container test tier's machines reach Debian's packages
# and PyPI only). Debian 12's python3 is 3.11, the version the images are tested with.
#
#   sh docker/base-image.sh [IMAGE]          # default IMAGE: crawlhive-base:bookworm
#   make images BASE_IMAGE=crawlhive-base:bookworm
#
# Cached: an existing IMAGE is kept (remove it with `docker rmi IMAGE` to rebuild). Needs root and
# debootstrap (installed from Debian's packages when apt-get is there).
set -eu
IMAGE="${1:-crawlhive-base:bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
if docker image inspect "$IMAGE" >/dev/null 2>&1; then
	echo "base image $IMAGE is there (docker rmi $IMAGE to rebuild it)"
	exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
	echo "installing Debian's debootstrap"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi
root="$(mktemp -d /tmp/crawlhive-base.XXXXXX)"
trap 'rm -rf "$root"' EXIT
echo "debootstrap: a minimal Debian bookworm with python3 and python3-venv into $root (a few minutes)"
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
	bookworm "$root" "$MIRROR" >"$root.log" 2>&1 || { tail -20 "$root.log"; exit 1; }
rm -f "$root.log"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
# The image's apt must find the same mirror (the render image installs Chromium).
echo "deb $MIRROR bookworm main" >"$root/etc/apt/sources.list"
echo "deb $MIRROR bookworm-updates main" >>"$root/etc/apt/sources.list"
tar -C "$root" -c . | docker import \
	--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	--change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
echo "built base image $IMAGE"
