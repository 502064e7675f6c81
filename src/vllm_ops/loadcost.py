"""What a job's model loads cost, for the reports and the plans: read from one place, ``job.json``.

The ``vllm`` role's health wait records every load it waits through after a start (its phases from
vLLM's own lines: :mod:`vllm_ops_host.loads` defines every figure); the job skeleton keeps the loads a job
caused in its ``job.json`` as ``loads`` (each with ``variant``: the server variant it loaded, null for
the normal service) and the disk's floor measured by the job's checks as ``disk`` (the ``vllm_disk``
role's record), read through :class:`vllm_ops.records.JobRecord`. The campaign's, the experiment's and the
tune's reports read them from there (:func:`summary`), and every plan reads the host's measured loads from
the same records (:func:`last_load`).

Definitions:

- **a job's loads**: ``job.json``'s ``loads`` (:attr:`vllm_ops.records.JobRecord.loads`), in the order they
  happened; a record of an older release has none (an empty list).
- **the host's last measured load** (:func:`last_load`), ``{seconds, source}``: the median ``total_s`` of
  the loads that got ready in the newest ``job.json`` that has any; else the median of the loads the
  newest ``tune.json`` timed; else the median closed gap of the newest ``job.json``'s downtime record (a
  gap is a stop and a load); else ``seconds`` null and why.
- **expected downtime** (:func:`expected`): loads x the host's last measured load.
- **the summary** (:func:`summary`): each load with its phases in words and set against the disk's floor
  (:func:`vllm_ops_host.loads.against_disk`), for the reports' tables; ``ready_s`` the loads' total times.
  :func:`read_job` is the summary of a job's directory (its ``job.json``), null without one.
- **the history's figures** (:func:`history_figures`): ``loads`` (how many the job caused), ``load_ready_s``
  (the median ``total_s`` of those that got ready), ``load_weights_gbps`` (the median weights rate of those),
  ``disk_gbps`` (the disk's floor); each null when not measured.
- **a variant's time to ready** (:func:`time_to_ready`): ``total_s`` of the *last* load of that variant
  in the job (null: the normal service's), so an experiment compares its variants' loads (a load format,
  the compile cache) as it compares their benchmarks; null when the job recorded no such load.

``vllm-load-report expect --loads N --under DIR`` prints :func:`expected` as JSON (the skeleton's check mode
and plan); ``vllm-load-report show DIR`` prints a job's loads in words.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Mapping
from pathlib import Path

from vllm_ops_host import loads as L

from .artifacts import JOB_JSON, find_newest
from .cliutil import run_command
from .errors import VllmOpsError
from .records import JobRecord, TuneRecord
from .records.tune import TUNE_JSON

__all__ = ["LoadInputError", "expected", "history_figures", "last_load", "main", "read_job",
           "server_words", "summary", "time_to_ready"]

PROG = "vllm-load-report"
DEPTH = 3  # <host>/<job id>/job.json below artifacts/<host> is level 2; an experiment's profile/ one deeper


class LoadInputError(VllmOpsError):
    """A job record whose loads cannot be read; the message names the file and the field."""


def _ready_seconds(items: list[Mapping]) -> list[float]:
    return [float(x["total_s"]) for x in items if x.get("ready") and isinstance(x.get("total_s"), (int, float))]


def _job_files(under: str | os.PathLike) -> list[str]:
    found = []
    for root, dirs, files in os.walk(under):
        if os.path.relpath(root, under).count(os.sep) >= DEPTH - 1:
            dirs[:] = []
        found += [os.path.join(root, f) for f in files if f == JOB_JSON]
    return sorted(found)


def last_load(under: str | Path | None) -> dict:
    """The host's last measured model load, ``{seconds, source}`` (the module's docstring)."""
    if under is None:
        return {"seconds": None, "source": "no artifacts directory given"}
    if os.path.isdir(under):
        for path in reversed(_job_files(under)):
            job = JobRecord.load(path)
            seconds = _ready_seconds(job.loads)
            if seconds:
                return {"seconds": round(statistics.median(seconds), 1),
                        "source": f"the {len(seconds)} load(s) of {job.kind or 'job'} {job.id}"}
    path = find_newest(under, TUNE_JSON)
    if path:
        tune = TuneRecord.load(path)
        timed = [x["seconds"] for x in tune.loads if isinstance(x.get("seconds"), (int, float))]
        if timed:
            return {"seconds": round(statistics.median(timed), 1),
                    "source": f"the loads timed by tune {tune.id}"}
    path = find_newest(under, JOB_JSON)
    if path:
        job = JobRecord.load(path)
        gaps = [g["seconds"] for g in ((job.downtime or {}).get("gap_list") or [])
                if isinstance(g, Mapping) and isinstance(g.get("seconds"), (int, float)) and not g.get("open")]
        if gaps:
            return {"seconds": round(statistics.median(gaps), 1),
                    "source": f"the downtime gaps of {job.kind or 'job'} {job.id}"}
    return {"seconds": None, "source": f"no load measured on this host yet (no tune.json or job.json under {under})"}


def expected(n_loads: int, load: Mapping) -> dict:
    """``{loads, load_s, source, downtime_s, words}``: the downtime ``n_loads`` loads cost at the host's last
    measured load (``load``: :func:`last_load`)."""
    s = load.get("seconds")
    downtime = None if s is None else round(n_loads * s, 1)
    if not n_loads:
        words = "no model load (the service is not restarted)"
    elif s is None:
        words = (f"{n_loads} model load(s); minutes unknown: {load.get('source')} (a Kimi-K2.5 load is about "
                 "30 min)")
    else:
        words = (f"{n_loads} model load(s), about {L.seconds_words(downtime)} of downtime at "
                 f"{L.seconds_words(s)} a load ({load.get('source')})")
    return {"loads": n_loads, "load_s": s, "source": load.get("source"), "downtime_s": downtime, "words": words}


def summary(items: list[Mapping], disk: Mapping | None) -> dict:
    """A job's loads for a report: ``{count, ready_s [s], disk, disk_words, loads [{n, variant, what, ready, total_s,
    failed_in, words, phases [{name, words, seconds, status}], weights, server (in words: :func:`server_words`),
    against, against_words, read_back (:func:`readback_words`)}], clause}``.
    ``clause`` is the headline's: ``2 loads, ready in 8.1 s (median), weights 6.8 s at 7.74 GB/s; disk floor
    not measured``, or null without loads."""
    out = []
    for n, x in enumerate(items, 1):
        verdict = L.against_disk(x, disk)
        out.append({
            "n": n, "variant": x.get("variant"), "what": x.get("what"), "ready": bool(x.get("ready")),
            "total_s": x.get("total_s"),
            "failed_in": x.get("failed_in"), "words": L.load_words(x), "started_at": x.get("started_at"),
            "phases": [{"name": p["name"], "words": L.phase_words(p), "seconds": p.get("seconds"),
                        "stated_s": p.get("stated_s"), "status": p.get("status"), "includes": p.get("includes") or [],
                        "why": p.get("why")} for p in x.get("phases") or []],
            "weights": dict(x.get("weights") or {}), "compile": dict(x.get("compile") or {}),
            "load_format": x.get("load_format"), "server": server_words(x),
            "against": verdict, "against_words": L.verdict_words(verdict),
            "read_back": readback_words(x),
        })
    ready = _ready_seconds(items)
    return {"count": len(items), "ready_s": ready, "disk": dict(disk) if disk else None,
            "disk_words": L.disk_words(disk), "loads": out, "clause": _clause(out, ready, disk)}


def readback_words(load: Mapping) -> str | None:
    """What the started server ran, read back from its process after the load (the vllm role's
    vllm_readback, ``readback`` of the load's record: ``runs what was asked: vLLM 0.32.0 (...)`` or
    each difference), with its PID; None for a load not read back (it did not get ready, or an older
    record)."""
    readback = load.get("readback")
    if not isinstance(readback, Mapping) or not readback.get("words"):
        return None
    return (f"PID {readback['pid']}: " if readback.get("pid") else "") + str(readback["words"])


def server_words(load: Mapping) -> str:
    """What a load loaded, in words: its variant, else the normal service (and what the load was when
    not a plain start: ``the normal service, the rollback to the last-known-good``)."""
    if load.get("variant"):
        return str(load["variant"])
    return "the normal service" + (f", {load['what']}" if load.get("what") else "")


def read_job(directory: str | os.PathLike) -> dict | None:
    """:func:`summary` of ``DIR/job.json``'s loads and disk floor; None when the directory has no job.json (a
    profiled variant reported while its experiment goes on)."""
    job = JobRecord.read(directory)
    return summary(job.loads, job.disk) if job is not None else None


def history_figures(loads_summary: Mapping | None) -> dict:
    """``{loads, load_ready_s, load_weights_gbps, disk_gbps}`` of a :func:`summary` (the module's docstring);
    all null without one (no job.json)."""
    if not loads_summary:
        return {"loads": None, "load_ready_s": None, "load_weights_gbps": None, "disk_gbps": None}
    ready = loads_summary.get("ready_s") or []
    rates = [x["weights"]["gbps"] for x in loads_summary.get("loads") or []
             if x.get("ready") and isinstance((x.get("weights") or {}).get("gbps"), (int, float))]
    return {"loads": loads_summary.get("count"),
            "load_ready_s": round(statistics.median(ready), 1) if ready else None,
            "load_weights_gbps": round(statistics.median(rates), 3) if rates else None,
            "disk_gbps": (loads_summary.get("disk") or {}).get("gbps")}


def time_to_ready(loads_summary: Mapping | None, variant: str | None) -> dict | None:
    """The last load of ``variant`` (None: the normal service) in a :func:`summary`: ``{n, ready, total_s, words,
    against_words}``; None when the job recorded none."""
    found = [x for x in (loads_summary or {}).get("loads") or [] if x.get("variant") == variant]
    if not found:
        return None
    x = found[-1]
    return {"n": x["n"], "ready": x["ready"], "total_s": x["total_s"], "words": x["words"],
            "against_words": x["against_words"]}


def _clause(out: list[dict], ready: list[float], disk: Mapping | None) -> str | None:
    if not out:
        return None
    head = f"{len(out)} load{'s' if len(out) != 1 else ''}"
    if ready:
        centre = statistics.median(ready)
        head += f", ready in {L.seconds_words(centre)}" + (" (median)" if len(ready) > 1 else "")
    failed = sum(1 for x in out if not x["ready"])
    if failed:
        head += f", {failed} did not get ready"
    weights = [x["weights"] for x in out if x["ready"] and x["weights"].get("gbps") is not None]
    if weights:
        w = weights[len(weights) // 2]
        head += f", weights {L.seconds_words(w['seconds'])} at {w['gbps']:.2f} GB/s"
    verdicts = {x["against"]["bound"] for x in out if x["ready"]} - {"unknown"}
    if disk and disk.get("gbps") is not None:
        head += f"; this disk reads {disk['gbps']:.2f} GB/s"
        if len(verdicts) == 1:
            head += {"disk": ": disk-bound", "not disk": ": not disk-bound",
                     "page cache": ": read from the page cache"}[verdicts.pop()]
    else:
        head += "; disk floor not measured"
    return head


# ------------------------------------------------------------------------------------------- command

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="What model loads cost: a plan's expected downtime from "
                                                       "the host's measured loads, or a job's loads in words.",
                                epilog="Exit status: 0 on success, 2 on bad input or usage (one line on stderr).")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    e = sub.add_parser("expect", help="the downtime N loads cost at the host's last measured load, as JSON")
    e.add_argument("--loads", required=True, type=int, help="model loads the job will cost")
    e.add_argument("--under", metavar="DIR", help="the host's artifacts (artifacts/HOST): its measured loads")
    s = sub.add_parser("show", help="a job's loads, phase by phase, against the disk's floor, in words")
    s.add_argument("dir", metavar="DIR", help="the job's directory (its job.json)")
    return p


def run(args: argparse.Namespace) -> list[str]:
    if args.command == "expect":
        if args.loads < 0:
            raise LoadInputError(f"--loads {args.loads}: give the number of model loads, 0 or more")
        return [json.dumps(expected(args.loads, last_load(args.under)))]
    job = JobRecord.load(Path(args.dir) / JOB_JSON)
    s = summary(job.loads, job.disk)
    lines = [f"load {x['n']} ({server_words(x)}): {x['words']}; {x['against_words']}" for x in s["loads"]]
    return [*lines, s["disk_words"], s["clause"] or "no load recorded"]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(PROG, lambda: "\n".join(run(args)))


if __name__ == "__main__":
    sys.exit(main())
