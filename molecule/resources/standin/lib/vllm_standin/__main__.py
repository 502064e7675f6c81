"""``python3 -m vllm_standin ...`` (with the package's directory on PYTHONPATH), or
``python3 .../vllm_standin ...``: the same as the launcher bin/vllm.

Run as a file or a directory rather than with -m (so also a child re-executed from here),
Python puts this package's own directory first on sys.path; its parent goes there instead, so
that ``vllm_standin`` is importable and no module here shadows one of the standard library."""

import os
import sys

if not __package__:
    here = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0] or ".") == here:
        sys.path[0] = os.path.dirname(here)
    else:
        sys.path.insert(0, os.path.dirname(here))

from vllm_standin.cli import run

run()
