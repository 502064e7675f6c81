"""What ``vllm_serve_check`` does on the host, in plain functions (unit-tested): read a vLLM
release's ``vllm serve --help=all`` and check a unit's command line against it.

vLLM renames and drops ``serve`` arguments between releases, and a server given an argument it
does not know exits at once (argparse: ``unrecognized arguments``), or worse, after a 30-minute
load when a JSON config field it no longer accepts is validated. So before a switch, every
argument the unit will pass must be an argument the new release lists, and every field of its
``--profiler-config`` a field of that release's ``ProfilerConfig``.

The help's layout (vLLM 0.31 and 0.32, argparse): an argument is a line indented by exactly two
spaces that starts with ``-``, its spellings separated by ``, -`` (``--api-server-count
API_SERVER_COUNT, -asc API_SERVER_COUNT``), its description after two or more spaces or on the
lines below, indented further; the profiler's fields are the keywords of the ``ProfilerConfig(...)``
shown as ``--profiler-config``'s default.

Standard library only: it runs on the vLLM hosts with their own Python (3.9 or newer).
"""

from __future__ import annotations

import contextlib
import difflib
import glob
import hashlib
import json
import os
import re
import shutil
import tempfile

_ARGUMENT = re.compile(r"^  (-\S.*)$")
_SPELLINGS = re.compile(r", (?=-)")
_VERSION = re.compile(r"docs\.vllm\.ai/en/v(\d+\.\d+\.\d+[\w.+-]*?)/")
_NUMBER = re.compile(r"^-\d")
JSON_CONFIG_FIELDS = {"--profiler-config": "ProfilerConfig"}


def arguments(help_text):
    """Every spelling of every argument the help lists (``--tensor-parallel-size``, ``-tp``, ...)."""
    found = set()
    for line in help_text.splitlines():
        match = _ARGUMENT.match(line)
        if not match:
            continue
        invocation = re.split(r"\s{2,}", match.group(1).strip())[0]
        for spelling in _SPELLINGS.split(invocation):
            found.add(spelling.split()[0])
    return found


def config_fields(help_text, config="ProfilerConfig"):
    """The field names of ``config`` as its default ``Config(field=..., ...)`` shows them, or None
    when the help does not show it."""
    start = help_text.find(config + "(")
    if start < 0:
        return None
    depth, i, body = 0, start + len(config), []
    while i < len(help_text):
        ch = help_text[i]
        depth += ch == "("
        depth -= ch == ")"
        body.append(ch)
        if depth == 0:
            break
        i += 1
    text = re.sub(r"\s+", "", "".join(body)[1:-1])
    fields, level, quote = [], 0, None
    token = ""
    for ch in text + ",":  # keywords at the top level only: field=value,field=value
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            level += 1
        elif ch in ")]}":
            level -= 1
        elif ch == "," and level == 0:
            if "=" in token:
                fields.append(token.split("=", 1)[0])
            token = ""
            continue
        token += ch
    return set(fields)


def help_version(help_text):
    """The release the help documents (its API docs links name it), or None."""
    match = _VERSION.search(re.sub(r"\n\s*", "", help_text))
    return match.group(1) if match else None


def option_name(name):
    """``name`` as vLLM's own parser reads it (FlexibleArgumentParser.parse_args): in a long option,
    every underscore between the leading ``--`` and the first ``.`` becomes a dash, so
    ``--max_model_len`` is ``--max-model-len`` and ``--profiler_config.torch_profiler_dir`` is
    ``--profiler-config.torch_profiler_dir`` (a dotted field keeps its own spelling)."""
    if not name.startswith("--"):
        return name
    option, dot, field = name[2:].partition(".")
    return "--" + option.replace("_", "-") + dot + field


def _suggest(name, known):
    close = difflib.get_close_matches(name, sorted(k for k in known if k.startswith("--")), n=1, cutoff=0.75)
    return " (did you mean %s?)" % close[0] if close else ""


def problems(argv, known, fields):
    """What of the command line ``argv`` (``[executable, "serve", MODEL, ...]``) the release does not
    take: one sentence per argument, naming it as written; an underscore spelling vLLM accepts
    (``--max_model_len``) is checked as the dashed one it reads (``option_name``). ``fields`` maps a
    JSON config argument (``--profiler-config``) to its release's field names (None: not listed, not
    checked)."""
    args = argv[3:] if len(argv) > 1 and argv[1] == "serve" else argv[1:]
    out = []
    for i, token in enumerate(args):
        if not token.startswith("-") or _NUMBER.match(token) or token == "-":
            continue
        name, eq, inline = token.partition("=")
        given_base = name.partition(".")[0]
        base, dot, field = option_name(name).partition(".")
        if base not in known and not (base.startswith("-") and not base.startswith("--") and base[:2] in known):
            out.append("%s is not an argument of this release%s" % (given_base, _suggest(base, known)))
            continue
        allowed = fields.get(base)
        if allowed is None:
            continue
        if dot:
            given = [field]
        else:
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            try:
                parsed = json.loads(value)
            except ValueError:
                continue  # the server's own parser says what is wrong with it
            given = list(parsed) if isinstance(parsed, dict) else []
        for key in given:
            if key not in allowed:
                close = difflib.get_close_matches(key, sorted(allowed), n=1, cutoff=0.75)
                out.append("%s field %s is not a field of this release's %s%s" % (
                    base, key, JSON_CONFIG_FIELDS[base], " (did you mean %s?)" % close[0] if close else ""))
    return out


def running_matches(cmdline, argv):
    """Whether a process's command line (``/proc/PID/cmdline`` split on NUL: an interpreter may come
    first, as for a Python script) runs exactly ``argv``."""
    if not argv or argv[0] not in cmdline:
        return False
    return cmdline[cmdline.index(argv[0]):] == list(argv)


def shebang_python(first_line, fallback="/usr/bin/python3"):
    """The interpreter a script's first line names (``#!/opt/vllm/0.32.0/bin/python``), the last word
    of an ``env`` line, or ``fallback``."""
    if not first_line.startswith("#!"):
        return fallback
    words = first_line[2:].split()
    if not words:
        return fallback
    if words[0].endswith("/env") and len(words) > 1:
        return words[-1]
    return words[0]


def executable_python(executable, fallback="/usr/bin/python3"):
    """The interpreter ``executable``'s first line names (:func:`shebang_python`), or ``fallback``
    when it names none or cannot be read."""
    try:
        with open(executable, encoding="utf-8", errors="replace") as handle:
            return shebang_python(handle.readline().strip(), fallback)
    except OSError:
        return fallback


def release_python(executable):
    """The interpreter ``executable``'s first line names, as an absolute path (a bare name such as an
    ``env`` line's looked up on ``PATH``), or "" when it names none or it is not found."""
    python = executable_python(executable, fallback="")
    if python and not os.path.isabs(python):
        python = shutil.which(python) or ""
    return python


def site_packages(python):
    """Every ``site-packages`` directory of the prefix of ``python`` (an absolute interpreter path:
    a virtual environment's own), sorted; none without an interpreter."""
    if not python:
        return []
    prefix = os.path.dirname(os.path.dirname(python))
    return [d for pattern in ("lib/python*/site-packages", "lib64/python*/site-packages")
            for d in sorted(glob.glob(os.path.join(prefix, pattern)))]


def release_fingerprint(executable, environment):
    """One digest of what a release's ``serve --help=all`` depends on, for its cache: the executable
    (path, inode, size, mtime), the interpreter its first line names, every ``site-packages``
    directory of that interpreter's prefix (pip creates and removes a ``*.dist-info`` there at every
    install, upgrade or reinstall, which changes the directory's mtime) and the help run's
    environment. A release edited in place below ``site-packages`` is not seen: releases are
    installed side by side and never edited (docs/deploy.md)."""
    parts = [repr(sorted((str(k), str(v)) for k, v in environment.items()))]

    def stat(path):
        try:
            st = os.stat(path)
        except OSError:
            return "%s missing" % path
        return "%s %d %d %d" % (path, st.st_ino, st.st_size, st.st_mtime_ns)

    parts.append(stat(os.path.realpath(executable)))
    python = release_python(executable)
    if python:
        parts.append(stat(python))
        parts.extend(stat(d) for d in site_packages(python))
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()


def cached_help(cache_dir, key, produce, write=True, keep=32):
    """``(rc, text, cached)``: the help kept in ``cache_dir`` under ``key``, or ``produce()``'s
    ``(rc, text)``, kept there (atomically, 0644) when it exited 0 and lists arguments and
    ``write`` (not in check mode). Keeps the ``keep`` newest entries. No ``cache_dir``: no cache."""
    path = os.path.join(cache_dir, key + ".txt") if cache_dir else None
    if path and os.path.isfile(path):
        with open(path, encoding="utf-8") as handle:
            return 0, handle.read(), True
    rc, text = produce()
    if not (path and write and rc == 0 and arguments(text or "")):
        return rc, text, False
    try:  # the cache only saves time: a directory that cannot be written keeps nothing, and says nothing
        os.makedirs(cache_dir, mode=0o755, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=".help-")
    except OSError:
        return rc, text, False
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError:  # a full disk: no half-written entry left behind
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        return rc, text, False

    def written(entry):
        try:
            return entry.stat().st_mtime_ns
        except OSError:
            return 0

    entries = sorted((e for e in os.scandir(cache_dir) if e.name.endswith(".txt")), key=written, reverse=True)
    for entry in entries[keep:]:
        with contextlib.suppress(OSError):
            os.unlink(entry.path)
    return rc, text, False
