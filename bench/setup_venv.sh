#!/bin/sh
# Create the benchmark's own venv (.cache/bench-venv, git-ignored) with HTA for the comparison.
# The project's .venv is left alone: HTA and its dependencies are benchmark-only.
set -eu
cd "$(dirname "$0")/.."
VENV=.cache/bench-venv
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install --quiet -r bench/requirements.txt
"$VENV/bin/python" -c "import hta; print('HTA ready in $VENV')"
