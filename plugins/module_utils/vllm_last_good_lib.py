"""The host's last-known-good of the vLLM service, in plain functions (unit-tested).

What the service ran the last time it came up healthy as the normal service: the unit, every
drop-in, the environment and secrets files, the loopback fence module, and a record of the vLLM
version and executable. The module ``vllm_last_good`` saves it after a healthy start and puts it
back when a change does not load (or on ``restore.yml``).

The store is a directory (root-only) holding ``manifest.json`` and ``blobs/<sha256>``, the saved
contents by their digest. A save writes the blobs first and replaces the manifest last, atomically,
so a save killed half-way leaves the previous last-known-good whole; blobs no manifest names are
removed by the next save.

Manifest (``schema`` ``vllm-ops/last-good/1``)::

    schema, saved_at (when its content last changed, ISO 8601 UTC), record {version,
    served_version, executable, venv_dir, unit}, dirs [path], files {path: STATE},
    history [{version, served_version, executable, venv_dir, first_saved_at, last_saved_at}]
    STATE = {present: false} | {present: true, sha256, mode, uid, gid}

A path of ``files`` is saved present or absent (a variant's drop-in that the last-known-good did
not have is removed on restore); every regular file directly in a path of ``dirs`` is saved, and
a file found there on restore that the last-known-good did not have is removed.

Standard library only: it runs on the vLLM hosts with their own Python (3.9 or newer).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile

SCHEMA = "vllm-ops/last-good/1"
MANIFEST = "manifest.json"
BLOBS = "blobs"
HISTORY_MAX = 20
RECORD_KEYS = ("version", "served_version", "executable", "venv_dir", "unit")


class LastGoodError(Exception):
    """A store that cannot be read or written; the message says which file and what to do."""


def file_state(path):
    """``{present: false}``, or the digest, mode and owner of the regular file at ``path``."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return {"present": False}
    if not stat.S_ISREG(info.st_mode):
        raise LastGoodError("%s is not a regular file: the last-known-good keeps files only" % path)
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            digest.update(chunk)
    return {"present": True, "sha256": digest.hexdigest(), "mode": stat.S_IMODE(info.st_mode),
            "uid": info.st_uid, "gid": info.st_gid}


def dir_files(directory):
    """The regular files directly in ``directory`` (sorted), none when it does not exist."""
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return []
    return [os.path.join(directory, n) for n in names if os.path.isfile(os.path.join(directory, n))]


def snapshot(files, dirs):
    """The state of every managed path now: each of ``files``, and every file in ``dirs``."""
    now = {path: file_state(path) for path in files}
    for directory in dirs:
        for path in dir_files(directory):
            now.setdefault(path, file_state(path))
    return now


def load(store):
    """The manifest of the store, or None when there is none yet."""
    path = os.path.join(store, MANIFEST)
    try:
        with open(path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise LastGoodError("%s cannot be read (%s): remove the directory %s and deploy again to keep a new "
                            "last-known-good" % (path, exc, store)) from None
    if not isinstance(manifest, dict) or manifest.get("schema") != SCHEMA or not isinstance(
            manifest.get("files"), dict):
        raise LastGoodError("%s is not a last-known-good manifest (%s): remove the directory %s and deploy "
                            "again" % (path, SCHEMA, store))
    return manifest


def differences(manifest, now):
    """Paths whose state now differs from the manifest's (content, mode, owner or presence), and
    files in its directories that it does not have, sorted."""
    saved = manifest["files"]
    out = set()
    for path, state in saved.items():
        if (now[path] if path in now else file_state(path)) != state:
            out.add(path)
    for directory in manifest.get("dirs") or []:
        for path in dir_files(directory):
            if path not in saved:
                out.add(path)
    return sorted(out)


def _write_atomic(path, data, mode, uid=None, gid=None):
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".%s." % os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        if uid is not None:
            os.chown(tmp, uid, gid)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _history(old, record, now_iso):
    """The versions the host ran, oldest first: a new entry when the executable changed, else the
    last one's ``last_saved_at`` moved to now."""
    history = [dict(h) for h in (old or []) if isinstance(h, dict)]
    entry = {k: record.get(k) for k in ("version", "served_version", "executable", "venv_dir")}
    if history and history[-1].get("executable") == entry["executable"]:
        history[-1].update(entry, last_saved_at=now_iso)
    else:
        history.append(dict(entry, first_saved_at=now_iso, last_saved_at=now_iso))
    return history[-HISTORY_MAX:]


def clean_record(record):
    return {k: (None if record.get(k) in (None, "") else str(record.get(k))) for k in RECORD_KEYS}


def save(store, files, dirs, record, now_iso, check_mode=False):
    """Keep what the paths hold now as the last-known-good. Returns ``(changed, manifest)``; a store
    that already holds exactly this (files and record) is left as it is."""
    old = load(store)
    now = snapshot(files, dirs)
    record = clean_record(record)
    dirs = sorted(set(dirs))
    if old is not None and old["files"] == now and old.get("record") == record and old.get("dirs") == dirs:
        if not check_mode:
            _drop_unnamed_blobs(store, old)  # what a save killed before its manifest left: not a change
        return False, old
    manifest = {"schema": SCHEMA, "saved_at": now_iso, "record": record, "dirs": dirs, "files": now,
                "history": _history((old or {}).get("history"), record, now_iso)}
    if check_mode:
        return True, manifest
    blobs = os.path.join(store, BLOBS)
    os.makedirs(blobs, mode=0o700, exist_ok=True)
    os.chmod(store, 0o700)
    for path, state in sorted(now.items()):
        if not state["present"]:
            continue
        blob = os.path.join(blobs, state["sha256"])
        if not os.path.exists(blob):
            with open(path, "rb") as handle:
                data = handle.read()
            if hashlib.sha256(data).hexdigest() != state["sha256"]:
                raise LastGoodError("%s changed while it was being saved: run again" % path)
            _write_atomic(blob, data, 0o600)
    _write_atomic(os.path.join(store, MANIFEST), (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode(),
                  0o600)
    _drop_unnamed_blobs(store, manifest)
    return True, manifest


def _drop_unnamed_blobs(store, manifest):
    blobs = os.path.join(store, BLOBS)
    wanted = {s["sha256"] for s in manifest["files"].values() if s.get("present")}
    for name in os.listdir(blobs) if os.path.isdir(blobs) else []:
        if name not in wanted:
            os.unlink(os.path.join(blobs, name))


def _saved_copy(store, path, state):
    """The saved content of ``path``, read from its blob and checked against its digest."""
    blob = os.path.join(store, BLOBS, state["sha256"])
    try:
        with open(blob, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise LastGoodError("the saved copy of %s (%s) cannot be read (%s): the last-known-good is damaged; nothing "
                            "was restored; deploy a known configuration with deploy.yml" % (path, blob, exc)) from None
    if hashlib.sha256(data).hexdigest() != state["sha256"]:
        raise LastGoodError("the saved copy of %s (%s) is damaged (its digest differs): nothing was restored; deploy "
                            "a known configuration with deploy.yml" % (path, blob))
    return data


def restore(store, manifest, check_mode=False):
    """Put the manifest's files back: each saved file whose state differs is rewritten (content,
    mode, owner), each saved absence and each unsaved file of its directories removed. All or
    nothing as far as the store goes: every saved copy it needs is read and checked against its
    digest before the first path is touched, so a damaged copy leaves every file as it was.
    Returns the paths changed, sorted."""
    changed = differences(manifest, {})
    if check_mode:
        return changed
    states = {path: manifest["files"].get(path, {"present": False}) for path in changed}
    contents = {path: _saved_copy(store, path, state) for path, state in states.items() if state["present"]}
    for path in changed:
        state = states[path]
        if not state["present"]:
            if os.path.lexists(path):
                os.unlink(path)
            continue
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        _write_atomic(path, contents[path], state["mode"], state["uid"], state["gid"])
    return changed


def describe(manifest):
    """One line: what the last-known-good runs and since when."""
    record = manifest.get("record") or {}
    version = record.get("served_version") or record.get("version") or "unknown version"
    return "vLLM %s (%s), kept %s" % (version, record.get("executable") or "?", manifest.get("saved_at") or "?")


def kept_versions(history, keep):
    """The virtual environments of the ``keep`` versions the host ran healthy most recently (by
    ``last_saved_at``, newest first)."""
    out = []
    for entry in sorted(history or [], key=lambda h: h.get("last_saved_at") or "", reverse=True):
        venv = entry.get("venv_dir")
        if venv and venv not in out:
            out.append(venv)
        if len(out) >= keep:
            break
    return out


def prune_plan(candidates, history, keep, protect=()):
    """The version directories to remove: of ``candidates`` (those the role installed), every one the
    host ran (it is in ``history``) that is neither among the ``keep`` it ran most recently nor in
    ``protect``. A version installed and not run yet (a new one, or one whose canary regressed) is
    left alone; nothing goes with ``keep`` 0."""
    if keep <= 0:
        return []
    ran = {h.get("venv_dir") for h in history or [] if h.get("venv_dir")}
    kept = set(kept_versions(history, keep)) | {p for p in protect if p}
    return sorted(c for c in candidates if c in ran and c not in kept)


# The role's mark on a version directory it installed (module vllm_version_marker): only a directory
# that holds it is ever removed by prune_plan's caller, module vllm_versions.
MARKER = ".vllm-ops-version"


def marker_text(version, installed_by):
    """The mark's text: which version the directory holds and what installed it."""
    return json.dumps({"installed_by": installed_by, "version": version}, indent=4, sort_keys=True) + "\n"
