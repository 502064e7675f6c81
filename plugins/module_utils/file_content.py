"""A small file a module writes whole from its arguments: written only when its text changed, atomically,
with the owner and mode the task gives (the module's ``add_file_common_args``), in check and diff mode.

For the modules that own a file's shape (``vllm_watch_config``, ``vllm_version_marker``), so that no
task shapes it in YAML. Standard library only, Python 3.9.
"""

from __future__ import annotations

import os
import tempfile


def _read(path):
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def ensure(module, path, text):
    """Make ``path`` hold ``text`` and the task's file attributes; returns ``(changed, diff)``, the diff of the
    text (empty when it is unchanged).

    In check mode nothing is written and ``changed`` says whether it would be."""
    before = _read(path)
    changed = before != text
    diff = {"before_header": path, "after_header": path, "before": before or "", "after": text} if changed else {}
    if changed and not module.check_mode:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path) or ".", prefix=f".{os.path.basename(path)}.")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        module.atomic_move(tmp, path)
    file_args = module.load_file_common_arguments(module.params, path=path)
    if module.check_mode and before is None:
        return True, diff  # no file yet: its attributes are the new file's
    return module.set_fs_attributes_if_different(file_args, changed), diff
