"""What a started vLLM server really runs, read back and compared with what was asked (unit-tested).

Every start the role makes is judged from the running main process, not from the files it rendered:
its arguments (``/proc/PID/cmdline``), the environment systemd gave it (``/proc/PID/environ``) and
its release (the vLLM distribution of the executable it runs, else the server's own ``/version``).
A difference names where it comes from when the unit's files say: a drop-in of someone else's whose
``Environment=`` or ``EnvironmentFile=`` sets the variable, or whose ``ExecStart=`` replaces the
command. The module ``vllm_readback`` reads the host; the functions here only compare.

systemd's rules followed for the source of a variable (systemd.exec(5)): a variable set by an
``EnvironmentFile=`` wins over ``Environment=``; among each kind the later assignment wins (the unit
file, then its drop-ins in order); an empty assignment of either kind clears the earlier ones;
``UnsetEnvironment=`` applies last.

Standard library only: it runs on the vLLM hosts with their own Python (3.9 or newer).
"""

from __future__ import annotations

import functools
import glob
import os
import shlex


def split_nul(data):
    """``/proc/PID/cmdline`` or ``environ`` (bytes, each string ended by a NUL) as a list of strings,
    an empty one (an empty argument) kept."""
    if data.endswith(b"\0"):
        data = data[:-1]
    return [part.decode("utf-8", "replace") for part in data.split(b"\0")] if data else []


def main_pid(run_command, unit):
    """The unit's main PID (``systemctl show``; ``run_command`` as AnsibleModule's), None when it runs
    none."""
    rc, out, _ = run_command(["systemctl", "show", "-p", "MainPID", "--value", unit])
    pid = out.strip() if rc == 0 else ""
    return int(pid) if pid.isdigit() and pid != "0" else None


def read_proc(pid, name):
    """``/proc/PID/<name>`` (``cmdline``, ``environ``) as its strings; OSError when the process is gone."""
    with open("/proc/%d/%s" % (pid, name), "rb") as handle:
        return split_nul(handle.read())


def environ_dict(entries):
    """``NAME=value`` entries as a dict (the first ``=`` splits)."""
    out = {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        if sep:
            out[name] = value
    return out


def _assignments(text):
    """The ``(key, value)`` lines of a unit file or drop-in, sections and comments left out, a line
    ending in a backslash joined to the next."""
    out, pending = [], ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;[":
            continue
        key, sep, value = line.partition("=")
        if sep:
            out.append((key.strip(), value.strip()))
    return out


def _words(value):
    try:
        return shlex.split(value)
    except ValueError:
        return value.split()


def _unescape(text):
    """A double-quoted value's text with each backslash escape replaced by the character it escapes."""
    out, escaped = [], False
    for ch in text:
        if escaped or ch != "\\":
            out.append(ch)
            escaped = False
        else:
            escaped = True
    return "".join(out)


def env_file_values(text):
    """What an ``EnvironmentFile=`` sets, name to value (comments left out; a value in double or single
    quotes unquoted, a backslash escaping the next character inside double quotes), the last of a
    repeated name winning."""
    values = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("export "):
            line = line[len("export "):].lstrip()
        name, sep, value = line.partition("=")
        if not (sep and name.strip()):
            continue
        value = value.strip()
        if len(value) > 1 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1] if value[0] == "'" else _unescape(value[1:-1])
        values[name.strip()] = value
    return values


DROPIN_ROOTS = ("/etc/systemd/system", "/run/systemd/system", "/usr/local/lib/systemd/system",
                "/usr/lib/systemd/system")


def unit_files(unit, fragment, dropin_paths, roots=DROPIN_ROOTS):
    """The unit's files in the order systemd applies them: its file, then its drop-ins by file name,
    those systemd has loaded (``dropin_paths``) and those in the unit's drop-in directories now (one
    not loaded yet, before the daemon-reload of the next start; a name in an earlier root hides the
    same name in a later one)."""
    by_name = {}
    for path in dropin_paths:
        by_name.setdefault(os.path.basename(path), path)
    for root in roots:
        for path in sorted(glob.glob(os.path.join(root, unit + ".d", "*.conf"))):
            by_name.setdefault(os.path.basename(path), path)
    return ([fragment] if fragment else []) + [by_name[name] for name in sorted(by_name)]


def unit_files_of(run_command, unit, roots=DROPIN_ROOTS):
    """:func:`unit_files` of the unit as systemd shows it now (``run_command`` as AnsibleModule's)."""
    shown = {}
    for prop in ("FragmentPath", "DropInPaths"):
        rc, out, _ = run_command(["systemctl", "show", "-p", prop, "--value", unit])
        shown[prop] = out.split() if rc == 0 else []
    return unit_files(unit, (shown["FragmentPath"] or [""])[0], shown["DropInPaths"], roots)


def unit_settings(files, read=None):
    """What each of ``files`` (the unit's file, then its drop-ins, in systemd's order) says about the
    environment and the command, in order: a list of ``(kind, path, value)`` with kind one of
    ``environment`` (value: {name: value}), ``environment_file`` (value: the file's path, its
    ``-`` dropped), ``unset`` (value: [names]) and ``exec_start`` (value: the command line);
    an empty assignment has value ``None`` (it clears the earlier ones of its kind)."""
    read = read or _read_text
    out = []
    for path in files:
        text = read(path)
        if text is None:
            continue
        for key, value in _assignments(text):
            if key == "Environment":
                pairs = dict(w.split("=", 1) for w in _words(value) if "=" in w)
                out.append(("environment", path, pairs if value else None))
            elif key == "EnvironmentFile":
                out.append(("environment_file", path, value.lstrip("-") if value else None))
            elif key == "UnsetEnvironment":
                out.append(("unset", path, _words(value) if value else None))
            elif key == "ExecStart":
                out.append(("exec_start", path, value or None))
    return out


def _read_text(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def variable_source(name, settings, read=None):
    """Where the unit's files set ``name``, by systemd's rules: ``{"file": the unit file or drop-in,
    "env_file": the EnvironmentFile that sets it or None, "how": words}``, or None when no file does."""
    read = read or _read_text
    env_lines, env_files, unset = [], [], None
    for kind, path, value in settings:
        if kind == "environment":
            env_lines = [] if value is None else [*env_lines, (path, value)]
        elif kind == "environment_file":
            env_files = [] if value is None else [*env_files, (path, value)]
        elif kind == "unset" and value and name in value:
            unset = path
    if unset:
        return {"file": unset, "env_file": None, "value": None, "how": "UnsetEnvironment=%s in %s" % (name, unset)}
    for path, env_file in reversed(env_files):
        text = read(env_file)
        values = env_file_values(text) if text is not None else {}
        if name in values:
            return {"file": path, "env_file": env_file, "value": values[name],
                    "how": "%s, the EnvironmentFile= of %s" % (env_file, path)}
    for path, pairs in reversed(env_lines):
        if name in pairs:
            return {"file": path, "env_file": None, "value": pairs[name],
                    "how": "Environment=%s=... in %s" % (name, path)}
    return None


def overrides(asked, unset, settings, own_files, read=None):
    """The asked variables that someone else's unit file would decide, before any start: each
    ``{name, asked, runs, source}`` where the effective setting (by systemd's rules) comes from a file
    not in ``own_files`` and differs from what is asked (``asked`` None: asked unset). Each
    environment file is read once, whatever the number of variables."""
    read = functools.lru_cache(maxsize=None)(read or _read_text)
    own = set(own_files)
    out = []
    for name in sorted(set(asked) | set(unset or [])):
        want = None if asked.get(name) is None else str(asked[name])
        found = variable_source(name, settings, read)
        if not found or (found["file"] in own and (found["env_file"] is None or found["env_file"] in own)):
            continue
        if found["value"] != want:
            out.append({"what": "environment", "name": name, "asked": want, "runs": found["value"],
                        "source": "%s (not this role's)" % found["how"]})
    return out


def command_source(settings):
    """The unit file or drop-in whose ``ExecStart=`` the service runs (the last after any reset)."""
    source = None
    for kind, path, value in settings:
        if kind == "exec_start":
            source = path if value else None
    return source


def running_script(cmdline, executable):
    """The program a command line runs: ``executable`` where it is in it, else the script after an
    interpreter (``python3 /opt/x/bin/vllm ...``), else the first word."""
    if executable and executable in cmdline:
        return executable
    if len(cmdline) > 1 and os.path.basename(cmdline[0]).startswith("python"):
        return cmdline[1]
    return cmdline[0] if cmdline else ""


def distribution_of(site_dirs, package="vllm"):
    """The distribution installed in ``site_dirs`` (an interpreter's ``site-packages`` directories)
    that provides the import package ``package``: ``{"name", "version", "path"}`` from its
    ``*.dist-info``, or None (none provides it: a checkout run from its source, a stand-in)."""
    wanted = package + "/__init__.py,"
    for site in site_dirs:
        for dist in sorted(glob.glob(os.path.join(site, "*.dist-info"))):
            record = _read_text(os.path.join(dist, "RECORD")) or ""
            if not any(line.startswith(wanted) for line in record.splitlines()):
                continue
            meta = _read_text(os.path.join(dist, "METADATA")) or ""
            fields = dict(line.split(": ", 1) for line in meta.splitlines()[:20] if ": " in line)
            return {"name": fields.get("Name"), "version": fields.get("Version"), "path": dist}
    return None


def public_version(version):
    """A release without its local part: ``0.32.0+cpu`` is ``0.32.0``."""
    return (version or "").split("+", 1)[0]


def compare_argv(asked, cmdline):
    """How a process's command line differs from the asked ``argv`` (an interpreter may come first):
    [] when it runs exactly that, else one difference naming the arguments asked and not run, and run
    and not asked."""
    if not asked:
        return []
    start = cmdline.index(asked[0]) if asked[0] in cmdline else None
    running = cmdline[start:] if start is not None else cmdline
    if running == list(asked):
        return []
    missing = [a for a in asked if a not in running]
    extra = [a for a in running if a not in asked]
    if start is None:
        words = "runs %s, not %s" % (running[0] if running else "nothing", asked[0])
    elif missing or extra:
        words = "; ".join(part for part in (
            "asked and not run: %s" % " ".join(missing) if missing else "",
            "run and not asked: %s" % " ".join(extra) if extra else "") if part)
    else:
        words = "the same arguments in another order"
    return [{"what": "arguments", "name": "ExecStart", "asked": list(asked), "runs": running, "words": words}]


def compare_executable(asked, cmdline):
    """Whether a process runs the executable ``asked`` (a start of the last-known-good, whose command
    is its saved unit's, compares only that): [] or one difference."""
    if not asked or asked in cmdline:
        return []
    runs = running_script(cmdline, "")
    return [{"what": "arguments", "name": "executable", "asked": [asked], "runs": cmdline,
             "words": "runs %s, not %s" % (runs or "nothing", asked)}]


def compare_environment(asked, unset, running):
    """The asked variables the process does not have as asked: each ``{what, name, asked, runs}``
    (``runs`` None: not set; ``asked`` None: asked to be unset)."""
    out = []
    for name in sorted(asked):
        want = None if asked[name] is None else str(asked[name])
        if running.get(name) != want:
            out.append({"what": "environment", "name": name, "asked": want, "runs": running.get(name)})
    for name in sorted(set(unset or []) - set(asked)):
        if name in running:
            out.append({"what": "environment", "name": name, "asked": None, "runs": running[name]})
    return out


def compare_release(asked, distribution, served):
    """The asked release against the executable's distribution (else the server's ``/version``)."""
    if not asked:
        return []
    runs = (distribution or {}).get("version") or served
    if runs and public_version(runs) == public_version(asked):
        return []
    return [{"what": "release", "name": "vLLM", "asked": asked, "runs": runs,
             "from": "the distribution %s" % distribution["path"] if distribution else
             "the server's /version" if served else "nothing (no distribution provides vllm, /version did not answer)"}]


def attribute(differences, settings, own_files, read=None):
    """Each difference with ``source``: the file that made it, where the unit's files say (a file
    not in ``own_files``, the role's own, is named as someone else's)."""
    own = set(own_files)
    command = command_source(settings)
    for diff in differences:
        source = None
        if diff["what"] == "environment":
            found = variable_source(diff["name"], settings, read)
            if found:
                theirs = found["file"] not in own or (found["env_file"] and found["env_file"] not in own)
                source = ("%s (not this role's)" if theirs else "%s") % found["how"]
            elif diff["runs"] is not None:
                source = "no file of the unit sets it: the service manager's own environment"
        elif diff["what"] == "arguments" and command:
            source = "ExecStart= in %s%s" % (command, "" if command in own else " (not this role's)")
        diff["source"] = source
    return differences


def describe(diff, runs_word="runs"):
    """One difference in words (``runs_word``: "would get" before a start)."""
    if diff["what"] == "environment":
        asked = "unset" if diff["asked"] is None else "%s=%s" % (diff["name"], diff["asked"])
        runs = "not set" if diff["runs"] is None else "%s=%s" % (diff["name"], diff["runs"])
        words = "%s: asked %s, %s %s" % (diff["name"], asked, runs_word, runs)
    elif diff["what"] == "release":
        words = "vLLM release: asked %s, runs %s (read from %s)" % (
            diff["asked"], diff["runs"] or "unknown", diff["from"])
    else:
        words = "arguments: %s" % diff["words"]
    return words + ("; set by %s" % diff["source"] if diff.get("source") else "")


def message(unit, pid, differences):
    """The failure's text: the process and each difference with its source."""
    return ("%s started (main PID %s) but does not run what was asked - %s. Remove or change what "
            "overrides it (systemctl cat %s shows every file of the unit), then run the play again."
            % (unit, pid, "; ".join(describe(d) for d in differences), unit))
