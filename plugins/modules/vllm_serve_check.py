#!/usr/bin/python
"""Check a unit's command line against the vLLM release that will run it; see DOCUMENTATION."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_serve_check
short_description: Check the arguments a vLLM unit passes against its release's vllm serve --help, before a switch
description:
  - Runs C(EXECUTABLE serve --help=all) (the release about to run, not the one serving) and fails,
    naming each one, when an argument of O(argv) is not one it lists, or a field of its
    C(--profiler-config) (JSON or dotted) is not a field of its C(ProfilerConfig).
  - For each C(--middleware MODULE.CLASS) of O(argv) whose module is in O(fence_dir), imports it with the
    release's own Python (the interpreter the executable's first line names) and fails when it does not import.
  - The help of a release is kept in O(cache_dir) under a digest of the release's files and the
    environment (module_utils/vllm_serve_help_lib.py release_fingerprint), and the next switch to the same
    release reads it instead of importing vLLM again (tens of seconds on a GPU host).
  - Reads only, but for that cache (never written in check mode).
    Skipped, saying so, when the unit's running server already runs exactly O(argv)
    (nothing would switch), and in check mode when the executable is not installed yet.
  - Logic and tests in module_utils/vllm_serve_help_lib.py.
options:
  argv:
    description: The command line the unit will run, C([executable, "serve", MODEL, ...]).
    type: list
    elements: str
    required: true
  unit:
    description: The systemd unit whose running server is compared with O(argv); empty compares nothing.
    type: str
    default: ""
  environment:
    description: Environment of the help run (the unit's, C(VLLM_TARGET_DEVICE=cpu) for the CPU build); nulls left out.
    type: dict
    default: {}
  fence_dir:
    description: The directory of the loopback fence module, put first on the import path of the fence check.
    type: path
  cache_dir:
    description: Where each release's help is kept (root's, 0755); empty keeps none.
    type: path
    default: /var/cache/vllm-ops/serve-help
  timeout_s:
    description: Seconds the help and the import may take each.
    type: float
    default: 300
author: vllm-ops maintainers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Check the vLLM that will run against the unit's arguments
  vllm_serve_check:
    argv: [/opt/vllm/0.33.0/bin/vllm, serve, /models/m, --tensor-parallel-size, "8"]
    unit: vllm-kimi-k25-int4.service
    fence_dir: /usr/local/lib/vllm-ops/python
"""

RETURN = r"""
checked:
  description: Whether the arguments were checked (false when skipped).
  type: bool
  returned: always
reason:
  description: Why the check was skipped, or what it checked.
  type: str
  returned: always
version:
  description: The release the help documents (from its API docs links), or null.
  type: str
  returned: always
problems:
  description: One sentence per argument the release does not take.
  type: list
  returned: always
arguments:
  description: How many argument spellings the release's help lists.
  type: int
  returned: always
cached:
  description: Whether the help was read from O(cache_dir) instead of run.
  type: bool
  returned: always
"""

import os
import shutil
import subprocess
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.vllm_ops.serving.plugins.module_utils.vllm_readback_lib import main_pid, read_proc
from ansible_collections.vllm_ops.serving.plugins.module_utils.vllm_serve_help_lib import (
    arguments,
    cached_help,
    config_fields,
    executable_python,
    help_version,
    problems,
    release_fingerprint,
    running_matches,
)


def running_cmdline(module, unit):
    pid = main_pid(module.run_command, unit) if unit else None
    if pid is None:
        return []
    try:
        return read_proc(pid, "cmdline")
    except OSError:
        return []


def run(argv, env, timeout_s):
    try:
        done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout_s,
                              check=False)
    except subprocess.TimeoutExpired:
        return None, "ran past %d s" % timeout_s
    except OSError as exc:
        return None, str(exc)
    text = done.stdout.decode("utf-8", "replace")
    return done.returncode, text


def fence_problem(argv, fence_dir, executable, env, timeout_s):
    """Whether the release's Python imports each --middleware the unit passes from fence_dir (the loopback
    fence, the traffic recorder): the first that does not, said, or None."""
    if not fence_dir:
        return None
    python = executable_python(executable)
    for at, arg in enumerate(argv[:-1]):
        if arg != "--middleware":
            continue
        target = argv[at + 1]
        module_name, class_name = target.rpartition(".")[::2]
        if not module_name or not os.path.exists(os.path.join(fence_dir, module_name + ".py")):
            continue
        code = "import sys; sys.path.insert(0, %r); import %s as m; getattr(m, %r)" % (
            fence_dir, module_name, class_name)
        rc, out = run([python, "-c", code], env, timeout_s)
        if rc != 0:
            last = (out or "").strip().splitlines()[-1:] or ["no output"]
            return "--middleware %s does not import with this release's Python (%s): %s" % (target, python, last[0])
    return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            argv=dict(type="list", elements="str", required=True),
            unit=dict(type="str", default=""),
            environment=dict(type="dict", default={}),
            fence_dir=dict(type="path"),
            cache_dir=dict(type="path", default="/var/cache/vllm-ops/serve-help"),
            timeout_s=dict(type="float", default=300),
        ),
        supports_check_mode=True,
    )
    p = module.params
    argv, executable = p["argv"], p["argv"][0]
    result = dict(changed=False, checked=False, version=None, problems=[], arguments=0, cached=False)
    if running_matches(running_cmdline(module, p["unit"]), argv):
        module.exit_json(reason="the running server already runs exactly these arguments: nothing switches", **result)
    if not os.access(executable, os.X_OK):
        if module.check_mode:
            module.exit_json(reason="%s is not installed yet (check mode): not checked" % executable, **result)
        module.fail_json(msg="%s is not an executable file: the release to check is not installed" % executable,
                         **result)
    home = tempfile.mkdtemp(prefix="vllm-serve-check-")  # whatever the help run caches goes nowhere that lasts
    try:
        env = dict(os.environ, HOME=home)
        env.update({str(k): str(v) for k, v in p["environment"].items() if v is not None})
        key = release_fingerprint(executable, p["environment"])
        rc, text, result["cached"] = cached_help(p["cache_dir"], key,
                                                 lambda: run([executable, "serve", "--help=all"], env, p["timeout_s"]),
                                                 write=not module.check_mode)
        if rc != 0:
            tail = " | ".join((text or "").strip().splitlines()[-5:])
            module.fail_json(msg="%s serve --help=all failed (%s): %s. Nothing was stopped." % (
                executable, "exit %s" % rc if rc is not None else "did not finish", tail), **result)
        known = arguments(text)
        if not known:
            module.fail_json(msg="%s serve --help=all lists no arguments: is this vLLM? Nothing was stopped."
                             % executable, **result)
        result.update(arguments=len(known), version=help_version(text))
        found = problems(argv, known, {"--profiler-config": config_fields(text, "ProfilerConfig")})
        fence = fence_problem(argv, p["fence_dir"], executable, env, p["timeout_s"])
        found += [fence] if fence else []
    finally:
        shutil.rmtree(home, ignore_errors=True)
    result.update(checked=True, problems=found)
    if found:
        module.fail_json(msg="vLLM %s at %s does not take what the unit would pass: %s. Nothing was stopped: "
                             "drop or rename it for this release (vllm_extra_args, a variant's extra_args, "
                             "vllm_profiler_config), or stay on the release that runs." % (
                                 result["version"] or "(release unknown)", executable, "; ".join(found)), **result)
    module.exit_json(reason="every argument is one of the %d %s lists%s" % (
        len(known), executable, " (its help as kept in %s)" % p["cache_dir"] if result["cached"] else ""), **result)


if __name__ == "__main__":
    main()
