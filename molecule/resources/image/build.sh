#!/usr/bin/env bash
# Build the sandbox host image: Debian 12 with systemd as PID 1, sshd, sudo
# and python3, made with debootstrap and `podman import` (no registry here).
# Idempotent: an image built from the same recipe is kept, so a re-run is a
# no-op. Usage: build.sh IMAGE_NAME   (e.g. localhost/vllm-ops-host)
set -euo pipefail

name=${1:?usage: build.sh IMAGE_NAME}
here=$(cd "$(dirname "$0")" && pwd)
packages=$(grep -v -e "^#" -e "^$" "$here/packages.txt" | paste -sd, -)
recipe=$(cat "$0" "$here/packages.txt" | sha256sum | cut -c1-12)
tag="$name:$recipe"

if podman image exists "$tag"; then
    echo "image $tag is up to date"
    podman tag "$tag" "$name:latest"
    exit 0
fi

work=$(mktemp -d /var/tmp/vllm-ops-rootfs.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "building $tag with debootstrap (1-3 minutes)"
debootstrap --variant=minbase --include="$packages" bookworm "$work/rootfs" >"$work/debootstrap.log" 2>&1 || {
    tail -n 20 "$work/debootstrap.log" >&2
    exit 1
}
# A container boots without a console login; sshd host keys are made on
# first boot by the sandbox bootstrap, never baked into the image.
rm -f "$work"/rootfs/etc/ssh/ssh_host_*
chroot "$work/rootfs" systemctl mask getty@tty1.service console-getty.service systemd-logind.service >/dev/null 2>&1 || true
tar -C "$work/rootfs" -c . | podman import --quiet \
    --change 'CMD ["/sbin/init"]' \
    --change 'STOPSIGNAL SIGRTMIN+3' \
    --change "LABEL vllm-ops.recipe=$recipe" \
    - "$tag" >/dev/null
podman tag "$tag" "$name:latest"
echo "built $tag"
