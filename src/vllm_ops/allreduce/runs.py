"""The all-reduce benchmark's runs on a host: what the ``allreduce_bench`` role executes.

Each run is ``allreduce_bench.py`` started by ``systemd-run`` as a transient unit, so that it
gets what the service gets from systemd itself: the service's user, group and GPU group, its
``EnvironmentFile`` (the ``NCCL_*`` settings, parsed by systemd as for the unit), its home and
its memlock limit, and a hard ``RuntimeMaxSec`` past the script's own budget. ``--wait --pipe``
hands back the script's exit status and its stderr. A variant's environment is laid over the
file's with ``env`` (``Environment=`` would lose to ``EnvironmentFile=``, which systemd
applies last).

The first run is always ``unit`` (the service's own environment); the variants follow in order.
Each writes ``allreduce-<name>.json`` (:func:`result_name`); the unit's, :data:`UNIT_RESULT`, is the
host's floor that a later campaign finds among the host's artifacts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

__all__ = ["BASELINE", "UNIT_RESULT", "bench_runs", "failures", "result_name"]

BASELINE = "unit"
# Seconds the transient unit may outlive the script's own --timeout-s (start-up, the JSON write).
RUNTIME_MARGIN_S = 120


def result_name(run: str) -> str:
    """The file a run's measurement is written to: ``allreduce-<run>.json``."""
    return f"allreduce-{run}.json"


UNIT_RESULT = result_name(BASELINE)


def _csv(values: Sequence[int]) -> str:
    return ",".join(str(int(v)) for v in values)


def bench_runs(settings: Mapping) -> list[dict]:
    """One ``{name, environment, out, unit, argv}`` per run: the unit's environment, then each
    variant of ``settings['variants']``. ``settings`` holds the role's resolved values: script,
    python, user, group, gpu_group, env_file, home_dir, host_dir, world_size, backend,
    model_config (or empty), batch_sizes, ladder, warmup, iters, reps, timeout_s, job_id, and
    optionally kill_mode (systemd's KillMode= of the run, control-group by default)."""
    runs = [{"name": BASELINE, "environment": {}}]
    runs += [{"name": v["name"], "environment": dict(v.get("environment") or {})}
             for v in settings.get("variants") or []]
    timeout_s = int(settings["timeout_s"])
    job = re.sub(r"[^A-Za-z0-9_.-]", "-", str(settings["job_id"]))
    out = []
    for index, run in enumerate(runs):
        result = f"{settings['host_dir']}/{result_name(run['name'])}"
        unit = f"vllm-ops-allreduce-{job}-{index}"
        argv = [
            "systemd-run", "--quiet", "--wait", "--pipe", "--collect", "--service-type=exec",
            f"--unit={unit}",
            f"--description=vllm-ops all-reduce benchmark ({run['name']})",
            "-p", f"User={settings['user']}", "-p", f"Group={settings['group']}",
            "-p", f"SupplementaryGroups={settings['gpu_group']}",
            "-p", f"EnvironmentFile={settings['env_file']}",
            "-p", f"Environment=HOME={settings['home_dir']}",
            "-p", f"WorkingDirectory={settings['home_dir']}",
            "-p", "LimitMEMLOCK=infinity",
            "-p", f"KillMode={settings.get('kill_mode') or 'control-group'}",
            "-p", f"RuntimeMaxSec={timeout_s + RUNTIME_MARGIN_S}",
            "--",
        ]
        if run["environment"]:
            argv += ["/usr/bin/env"] + [f"{k}={v}" for k, v in sorted(run["environment"].items())]
        argv += [settings["python"], settings["script"],
                 "--world-size", str(int(settings["world_size"])), "--backend", settings["backend"],
                 "--batch-sizes", _csv(settings["batch_sizes"]), "--ladder", _csv(settings["ladder"]),
                 "--warmup", str(int(settings["warmup"])), "--iters", str(int(settings["iters"])),
                 "--reps", str(int(settings["reps"])), "--timeout-s", str(timeout_s),
                 "--label", run["name"], "--out", result]
        if settings.get("model_config"):
            argv += ["--model-config", settings["model_config"]]
        out.append({"name": run["name"], "environment": run["environment"], "out": result, "unit": unit,
                    "argv": argv})
    return out


def failures(results: Sequence[Mapping]) -> list[str]:
    """``NAME=WHY`` for each failed run of the measuring loop (its registered ``results``): the
    last line the script wrote on stderr (it says what failed and what to do), else the task's
    message."""
    out = []
    for r in results:
        if r.get("rc") == 0:
            continue
        lines = [line for line in r.get("stderr_lines") or [] if line.strip()]
        why = lines[-1].strip() if lines else (r.get("msg") or f"exit status {r.get('rc')}")
        out.append(f"{r['item']['name']}={why}")
    return out
