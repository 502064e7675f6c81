"""Action side of vllm_wait_healthy: wait through a long load, showing progress.

A module cannot print while it runs, and a 30-minute model load must not be
silent, so this plugin runs the module one window at a time and prints the
loading progress between windows, and the load's phases once it ends (with
record_load).
"""

from __future__ import annotations

import time

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

display = Display()


class ActionModule(ActionBase):
    _VALID_ARGS = frozenset(("unit", "url", "timeout_s", "poll_interval_s", "progress_interval_s", "request_timeout_s",
                             "record_load", "model_path"))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        try:
            timeout_s = int(args.get("timeout_s", 2400))
            interval_s = max(int(args.get("progress_interval_s", 60)), 1)
            poll_s = float(args.get("poll_interval_s", 5))
            unit, url = args["unit"], args["url"]
        except (KeyError, TypeError, ValueError) as exc:
            raise AnsibleActionFail(f"vllm_wait_healthy: bad arguments: {exc}") from exc

        host = task_vars.get("inventory_hostname", "?") if task_vars else "?"
        started = time.monotonic()
        invocation = ""
        overtime = False
        while True:
            elapsed = time.monotonic() - started
            window = max(min(interval_s, timeout_s - elapsed), poll_s)
            module_args = {
                "unit": unit,
                "url": url,
                "window_s": window,
                "poll_interval_s": poll_s,
                "invocation_id": invocation,
            }
            for key in ("request_timeout_s", "record_load", "model_path"):
                if key in args:
                    module_args[key] = args[key]
            if boolean(module_args.get("record_load", False), strict=False):
                module_args["last_window"] = elapsed + window >= timeout_s
            answer = self._execute_module(
                module_name="vllm_ops.serving.vllm_wait_healthy", module_args=module_args, task_vars=task_vars
            )
            elapsed = time.monotonic() - started
            answer["elapsed_s"] = round(elapsed, 1)
            if answer.get("load_words"):
                display.display(f"{host}: {unit} load: {answer['load_words']}", color="cyan")
            if answer.get("failed") or answer.get("healthy"):
                result.update(answer)
                result["changed"] = False
                return result
            invocation = answer.get("invocation_id", "")
            if (elapsed >= timeout_s and not overtime and "load" not in answer
                    and boolean(module_args.get("record_load", False), strict=False)):
                # The time ran out in a window that was not meant to be the last (the calls' own
                # overhead): one more, short, and the last (elapsed is past the timeout), so that a
                # load that timed out is recorded too.
                overtime = True
                continue
            if elapsed >= timeout_s:
                result.update(answer)
                result.update(
                    failed=True,
                    changed=False,
                    msg=f"{unit} was not healthy after {timeout_s}s (vllm_health_timeout_s): "
                    f"{answer.get('progress')}; /health status {answer.get('status')}.",
                )
                return result
            display.display(
                f"{host}: {unit} not ready after {int(elapsed)}s: {answer.get('progress')}",
                color="cyan",
            )
