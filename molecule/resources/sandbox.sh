#!/usr/bin/env bash
# Sandbox hosts: podman containers with systemd as PID 1 that are reached
# the way production hosts are, over SSH on a loopback port as the
# unprivileged user `ops`, who has sudo for `become`.
#
#   sandbox.sh up NAME SSH_PORT [VOLUME...]
#                                  start (or reuse) NAME, print when SSH works;
#                                  each VOLUME is a podman --volume argument
#   sandbox.sh down NAME           remove NAME (no error if it is absent)
#   sandbox.sh fleet NAME FILE     write FILE, an inventory file that adds to vllm_servers every
#                                  sandbox container NAME-2, NAME-3, ... that exists now (with
#                                  the port it publishes), or remove FILE when there is none
#
# The SSH key pair lives in .sandbox/ at the repository root (git-ignored).
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
image=${VLLM_OPS_IMAGE:-localhost/vllm-ops-host:latest}
key="$root/.sandbox/id_ed25519"

# Under a lock: the lanes start two scenarios at once, and in a fresh clone both would make the key;
# the second ssh-keygen then asks whether to overwrite it, with no one to answer, and fails.
ensure_key() {
    mkdir -p "$root/.sandbox"
    (
        flock 9
        [ -f "$key" ] || ssh-keygen -q -t ed25519 -N '' -C vllm-ops-sandbox -f "$key"
    ) 9>"$root/.sandbox/key.lock"
}

wait_for() {  # wait_for SECONDS DESCRIPTION CMD...
    local limit=$1 what=$2 i
    shift 2
    for ((i = 0; i < limit; i++)); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 1
    done
    echo "sandbox: $what did not happen within ${limit}s" >&2
    return 1
}

booted() {
    local state
    state=$(podman exec "$1" systemctl is-system-running 2>/dev/null) || true
    [ "$state" = running ] || [ "$state" = degraded ]
}

# A container podman records as running (or stopping) whose processes are gone, as after the
# machine restarted under it: podman can neither reach nor start it, so it is made anew (what the
# jobs wrote is on the controller, under artifacts/).
stale() {
    echo "sandbox: $1 is recorded as $(podman container inspect -f '{{.State.Status}}' "$1") but its processes are gone; making it anew" >&2
    podman rm -f --time 0 "$1" >/dev/null
}

up() {
    local name=$1 port=$2 volume
    local volumes=()
    shift 2
    for volume in "$@"; do
        volumes+=(--volume "$volume")
    done
    ensure_key
    if podman container exists "$name"; then
        case $(podman container inspect -f '{{.State.Status}}' "$name") in
            running) podman exec "$name" true >/dev/null 2>&1 || stale "$name" ;;
            created | configured | exited | stopped) podman start "$name" >/dev/null ;;
            *) stale "$name" ;;
        esac
    fi
    if ! podman container exists "$name"; then
        podman run -d --name "$name" --hostname "$name" \
            --systemd=always --cap-add SYS_PTRACE --shm-size 1g \
            --publish "127.0.0.1:$port:22" "${volumes[@]}" \
            --label vllm-ops.sandbox=1 \
            "$image" /sbin/init >/dev/null
    fi
    wait_for 60 "systemd boot in $name" booted "$name"
    podman exec -i "$name" bash -s <"$root/molecule/resources/bootstrap.sh" "$(cat "$key.pub")"
    wait_for 30 "SSH login to $name on 127.0.0.1:$port" \
        ssh -i "$key" -p "$port" -o BatchMode=yes -o StrictHostKeyChecking=no \
        -o UserKnownHostsFile=/dev/null -o ConnectTimeout=2 ops@127.0.0.1 true
    echo "sandbox $name is up: ssh -i $key -p $port ops@127.0.0.1"
}

down() {
    podman rm -f --time 5 "$1" >/dev/null 2>&1 || true
    echo "sandbox $1 removed"
}

# The further hosts of a fleet sandbox: NAME-2, NAME-3, ... as they exist, in number order.
further() {
    podman ps -a --filter label=vllm-ops.sandbox=1 --format '{{.Names}}' |
        grep -E "^$1-[0-9]+\$" | sort -t- -k"$(($(tr -cd - <<<"$1" | wc -c) + 2))"n || true
}

fleet() {
    local name=$1 file=$2 host port
    local hosts
    hosts=$(further "$name")
    if [ -z "$hosts" ]; then
        rm -f "$file"
        return 0
    fi
    {
        echo "---"
        echo "# Written by make sandbox (molecule/resources/sandbox.sh fleet): the further sandbox hosts"
        echo "# that exist now. Not versioned; make sandbox-destroy removes it (docs/sandbox.md)."
        echo "vllm_servers:"
        echo "  hosts:"
        for host in $hosts; do
            port=$(podman port "$host" 22/tcp | head -n1)
            port=${port##*:}
            echo "    $host:"
            echo "      ansible_host: 127.0.0.1"
            echo "      ansible_port: $port"
            echo "      ansible_user: ops"
            echo "      ansible_ssh_private_key_file: \"{{ inventory_dir }}/../../.sandbox/id_ed25519\""
            echo "      ansible_ssh_common_args: -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"
            echo "      ansible_host_key_checking: false"
        done
    } >"$file.tmp"
    mv "$file.tmp" "$file"
    echo "sandbox fleet: $(wc -w <<<"$hosts") more host(s) in $file: $(echo $hosts)"
}

case "${1:-}" in
up)
    shift
    up "${1:?NAME}" "${2:?SSH_PORT}" "${@:3}"
    ;;
down) down "${2:?NAME}" ;;
further) further "${2:?NAME}" ;;
fleet) fleet "${2:?NAME}" "${3:?FILE}" ;;
*)
    echo "usage: sandbox.sh up NAME SSH_PORT [VOLUME...] | down NAME | further NAME | fleet NAME FILE" >&2
    exit 2
    ;;
esac
