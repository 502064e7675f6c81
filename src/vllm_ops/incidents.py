"""The watch's incidents on the controller: which of a host's to fetch, and the report that reads them.

``playbooks/incidents.yml`` fetches what the watch (``roles/vllm/files/vllm_ops_watch.py``) kept on
each host into the artifacts::

    artifacts/<host>/incidents/watch-state.json        the watch's state when fetched
    artifacts/<host>/incidents/<UTC time>/incident.json   one incident: verdict, stall, processes, action
        py-spy-<pid>.txt, metrics.txt, journal.txt, nvidia-smi.txt   its evidence, as the host kept it
        capture/                                       a slowdown's live capture: a trace per rank, topology.txt,
                                                       and summary.json (the trace summary, written here once)
    artifacts/incidents.md                             this module's report over every host

:func:`pending` says which of a host's incidents to fetch: those not here yet, and those fetched
while the watch was still writing them (no action yet, or a restart whose outcome was still open),
so that a second run fetches nothing new and a restart's outcome is never left half-known.
:func:`summary` reads every fetched incident into the figures the report template prints (its
stuck processes, frame by frame; what the watch did; the restart's load, phase by phase, in the
words of :mod:`vllm_ops_host.loads`; a slowdown's figures against its baseline, what changed on the host
since the baseline, and its live capture's verdict, from the trace summary of :mod:`vllm_ops.traces`);
:func:`headline` is its one line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping
from pathlib import Path

from vllm_ops_host import loads

from .artifacts import write_text
from .cliutil import read_json, run_command
from .errors import VllmOpsError
from .records import IncidentRecord, RecordError, SummaryRecord
from .records.incident import INCIDENT_JSON
from .render import render
from .traces import SummaryOptions, TraceInputError, summarize
from .traces.render import verdict_sentence
from .traces.topology import parse_topology

__all__ = ["REPORT", "IncidentInputError", "action_words", "headline", "pending", "summary"]

PROG = "vllm-incidents-report"
INCIDENTS = "incidents"  # a host's directory of them, under artifacts/<host>/
STATE_JSON = "watch-state.json"
REPORT = "incidents.md"
NAME = re.compile(r"^\d{8}T\d{6}Z$")  # the watch's directory names: the incident's UTC time
FRAMES = 4  # frames shown per process, innermost first
ROLE_ORDER = {"API server": 0, "engine": 1, "worker": 2}
CAPTURE = "capture"  # a slowdown incident's live capture, its own directory
UNCHANGED = ("nothing the watch reads changed: vLLM's version, the unit's and the environment files, the NCCL "
             "settings, the GPU driver, the PCIe link widths")


class IncidentInputError(VllmOpsError):
    """A fetched incident or the artifacts directory cannot be read."""


def pending(host_dir: str | Path, names: list[str]) -> list[str]:
    """Of the host's incident ``names``, those to fetch into ``host_dir`` (``artifacts/<host>/incidents``):
    not fetched yet, or fetched before the watch had written their outcome. Sorted; names that are not
    the watch's are left out."""
    out = []
    for name in sorted(set(names)):
        if not NAME.match(name):
            continue
        path = Path(host_dir) / name / INCIDENT_JSON
        try:
            finished = IncidentRecord.load(path).finished()
        except RecordError:  # not fetched, or fetched damaged: fetch it (again)
            finished = False
        if not finished:
            out.append(name)
    return out


def action_words(action: Mapping | None) -> str:
    """What the watch did (an :class:`IncidentRecord`'s ``action``), in words."""
    if action is None:
        return "nothing yet: the watch was still writing the incident"
    if action.get("taken") == "capture":
        if action.get("ok") is None:
            return "live capture under way when fetched: fetch again for its traces"
        return ("captured the service as it ran, no restart" if action.get("ok")
                else f"live capture failed, no restart: {action.get('why') or 'no reason given'}")
    if action.get("taken") != "restart":
        return f"recorded, not restarted: {action.get('why') or 'no reason given'}"
    if action.get("ok") is None:
        return f"restart under way (main PID {action.get('old_main_pid')}) when fetched: fetch again for its outcome"
    if action.get("ok"):
        return (f"restarted: main PID {action.get('old_main_pid')} -> {action.get('main_pid')}, healthy again in "
                f"{loads.seconds_words(action.get('seconds_to_healthy'))}")
    return f"restart failed: {action.get('why') or 'not healthy in the health wait'}"


def _load_words(action: Mapping | None) -> str | None:
    load = action.get("load") if action else None
    if not isinstance(load, Mapping):
        return None
    if load.get("error"):
        return f"not recorded: {load['error']}"
    return loads.load_words(load)


def _frames(process: Mapping) -> list[str]:
    """The main thread's innermost frames (else the first thread that has any)."""
    threads = [t for t in process.get("py_spy") or [] if isinstance(t, Mapping) and t.get("frames")]
    main = [t for t in threads if t.get("thread") in ("MainThread", str(process.get("pid")))]
    chosen = (main or threads)[:1]
    return list(chosen[0]["frames"][:FRAMES]) if chosen else []


def _who(process: Mapping) -> str:
    role = process.get("role") or "other"
    return f"worker rank {process.get('rank')}" if role == "worker" else role


def _process_row(process: Mapping) -> dict:
    return {"who": _who(process), "name": process.get("name") or "?", "pid": process.get("pid"),
            "state": process.get("state") or "?", "wchan": process.get("wchan") or "?",
            "threads": len(process.get("threads") or []), "frames": _frames(process),
            "py_spy_error": process.get("py_spy_error")}


def _stall_words(stall: Mapping | None) -> str:
    if stall is None:
        return "?"
    reading = stall.get("reading") if isinstance(stall.get("reading"), Mapping) else {}
    busy = reading.get("busy")
    held = f" with {busy:g} request(s) in flight" if isinstance(busy, (int, float)) else ""
    limit = loads.seconds_words(stall.get("stall_s")) + (", derived" if stall.get("derived") else "")
    return f"no step for {loads.seconds_words(stall.get('stalled_s'))}{held} (stall after {limit})"


def _pct(value: object) -> str:
    return f"{value:+.0%}" if isinstance(value, (int, float)) else "?"


def _num(value: object, spec: str) -> str:
    """A figure of an incident in ``spec``'s format; ``?`` where the watch recorded none."""
    return format(value, spec) if isinstance(value, (int, float)) and not isinstance(value, bool) else "?"


def _slowdown(slowdown: Mapping | None) -> dict | None:
    """A slowdown's figures in words: the last judged interval against the baseline, the baseline, what
    changed on the host since it."""
    if slowdown is None:
        return None
    latest = slowdown.get("latest") if isinstance(slowdown.get("latest"), Mapping) else {}
    base = slowdown.get("baseline") if isinstance(slowdown.get("baseline"), Mapping) else {}
    figures = (f"step {_num(latest.get('step_ms'), '.2f')} ms at batch {_num(latest.get('batch'), '.1f')}, the "
               f"baseline's {_num(latest.get('expected_ms'), '.2f')} ms at that batch: {_pct(latest.get('residual'))} "
               f"(band {_num(latest.get('band'), '.0%')}), since {slowdown.get('since') or '?'}, held "
               f"{loads.seconds_words(slowdown.get('held_s'))}")
    batch = base.get("batch") if isinstance(base.get("batch"), list) and len(base.get("batch")) == 2 else [None, None]
    kv = f" + {_num(base.get('c'), '.3f')} ms a unit of KV usage" if base.get("c") else ""
    by = f" from {slowdown['baseline_by']}" if slowdown.get("baseline_by") else ""
    baseline = (f"fitted {slowdown.get('fitted_at') or '?'}{by} on {base.get('intervals', '?')} intervals at batch "
                f"{_num(batch[0], '.1f')} to {_num(batch[1], '.1f')}: {_num(base.get('a'), '.2f')} ms + "
                f"{_num(base.get('b'), '.3f')} ms a sequence{kv}, band {_num(base.get('band'), '.0%')}")
    changed = [str(c) for c in slowdown.get("changes") or []]
    if not changed and not slowdown.get("host_at_baseline"):
        changed = ["not known: the baseline was fitted before the watch kept what the host was (remove the host's "
                   "baseline.json for a new one)"]
    return {"figures": figures, "baseline": baseline, "changes": changed or [UNCHANGED]}


def _capture(path: Path, record: IncidentRecord) -> dict | None:
    """A slowdown's live capture: what ran and its verdict (the trace summary of ``capture/``, written there as
    ``summary.json`` the first time and read from it after)."""
    if record.kind != "slowdown":
        return None
    capture, action = record.capture, record.action or {}
    if not capture:
        why = action.get("why") or "the watch was still deciding"
        return {"words": f"none: {why}", "verdict": None, "summary": None}
    if not capture.get("ok"):
        return {"words": f"failed: {capture.get('why') or 'no reason given'}", "verdict": None, "summary": None}
    words = (f"{loads.seconds_words(capture.get('seconds'))} of the service's own traffic from "
             f"{capture.get('started_at') or '?'}, {len(capture.get('traces') or [])} rank(s), no restart")
    directory = path / CAPTURE
    stored = directory / SummaryRecord.FILE  # where the record is written, below
    try:
        if stored.is_file():
            try:
                trace_summary = SummaryRecord.load(stored).to_dict()
            except RecordError as exc:
                raise IncidentInputError(str(exc)) from None
        else:
            topology = directory / "topology.txt"
            context = {"tensor_parallel_size": capture.get("tensor_parallel_size"),
                       "interconnect": parse_topology(topology.read_text(encoding="utf-8", errors="replace")
                                                      if topology.is_file() else None)["interconnect"]}
            files = [str(directory / t["file"]) for t in capture.get("traces") or [] if isinstance(t, Mapping)]
            given = {k: v for k, v in context.items() if v is not None}
            trace_summary = summarize(files, SummaryOptions(context=given))
            SummaryRecord.from_dict(trace_summary, "the capture's summary").dump(directory)
    except (TraceInputError, OSError, KeyError) as exc:
        return {"words": words, "verdict": f"the capture's traces cannot be read: {exc}", "summary": None}
    return {"words": words, "verdict": verdict_sentence(trace_summary), "summary": str(stored)}


def _incident(host: str, path: Path) -> dict:
    try:
        record = IncidentRecord.load(path / INCIDENT_JSON)
    except RecordError as exc:
        raise IncidentInputError(str(exc)) from None
    processes = sorted(record.processes, key=lambda p: (ROLE_ORDER.get(p.get("role"), 3), p.get("rank") or 0,
                                                        p.get("pid") or 0))
    action = record.action
    return {"host": host, "time": record.time, "dir": str(path), "verdict": record.verdict, "kind": record.kind,
            "slowdown": _slowdown(record.slowdown), "capture": _capture(path, record),
            "stall": _stall_words(record.stall), "taken": action.get("taken") if action else None,
            "ok": action.get("ok") if action else None, "action": action_words(action), "load": _load_words(action),
            "processes": [_process_row(p) for p in processes],
            "nccl": ", ".join(f"{k}={v}" for k, v in sorted(record.nccl_environment.items())) or "none set",
            "files": sorted(p.name for p in path.iterdir() if p.name != INCIDENT_JSON)}


def summary(artifacts: str | Path) -> dict:
    """Every host's fetched incidents under ``artifacts`` (``<host>/incidents/``), newest first per host."""
    root = Path(artifacts)
    if not root.is_dir():
        raise IncidentInputError(f"artifacts {root}: no such directory (run playbooks/incidents.yml first)")
    hosts = []
    for incidents_dir in sorted(root.glob(f"*/{INCIDENTS}")):
        host = incidents_dir.parent.name
        state_path = incidents_dir / STATE_JSON
        state = read_json(state_path, "watch state", IncidentInputError) if state_path.is_file() else None
        found = sorted((p for p in incidents_dir.iterdir() if NAME.match(p.name) and (p / INCIDENT_JSON).is_file()),
                       key=lambda p: p.name, reverse=True)
        hosts.append({"host": host, "said": state.get("said") if isinstance(state, Mapping) else None,
                      "restarts": len(state.get("restarts") or []) if isinstance(state, Mapping) else None,
                      "incidents": [_incident(host, p) for p in found]})
    every = [i for h in hosts for i in h["incidents"]]
    return {"hosts": hosts, "count": len(every),
            "restarted": sum(1 for i in every if i["taken"] == "restart" and i["ok"]),
            "failed": sum(1 for i in every if i["taken"] == "restart" and i["ok"] is False),
            "recorded": sum(1 for i in every if i["taken"] not in ("restart", "capture", None)),
            "slowdowns": sum(1 for i in every if i["kind"] == "slowdown"),
            "captured": sum(1 for i in every if i["taken"] == "capture" and i["ok"]),
            "newest": max(every, key=lambda i: i["time"], default=None)}


def headline(s: Mapping) -> str:
    """One line: how many incidents on how many hosts, what the watch did, the newest's verdict."""
    hosts = len(s["hosts"])
    if not s["count"]:
        return f"no incident on {hosts} host(s)"
    stalls = s["count"] - s["slowdowns"]
    parts = [f"{s['restarted']} restarted"] if stalls else []
    if s["failed"]:
        parts.append(f"{s['failed']} restart(s) failed")
    if s["slowdowns"]:
        parts.append(f"{s['slowdowns']} slowdown(s), {s['captured']} captured")
    if s["recorded"]:
        parts.append(f"{s['recorded']} recorded only")
    newest = s["newest"]
    return (f"{s['count']} incident(s) on {sum(1 for h in s['hosts'] if h['incidents'])} of {hosts} host(s): "
            f"{', '.join(parts)}; newest {newest['host']} {newest['time']}: {newest['verdict']}")


# ------------------------------------------------------------------------------------------- command

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="The watch's incidents fetched by playbooks/incidents.yml: "
                                                       "which to fetch, and their report.",
                                epilog="Exit status: 0 on success, 2 on bad input or usage (one line on stderr).")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    f = sub.add_parser("pending", help="of a host's incidents, those to fetch (not here, or unfinished), as JSON")
    f.add_argument("dir", metavar="DIR", help="the host's fetched incidents (artifacts/HOST/incidents)")
    f.add_argument("names", nargs="*", metavar="NAME", help="the incident directories on the host")
    s = sub.add_parser("report", help="write artifacts/incidents.md over every host's incidents; print each one")
    s.add_argument("dir", metavar="ARTIFACTS", help="the artifacts directory (artifacts/HOST/incidents inside)")
    s.add_argument("--template", help="a report template instead of the shipped incidents_report.md.j2")
    return p


def run(args: argparse.Namespace) -> list[str]:
    if args.command == "pending":
        return [json.dumps(pending(args.dir, args.names))]
    s = summary(args.dir)
    lines = [f"{i['host']} {i['time']}: {i['verdict']}; {i['action']}" for h in s["hosts"] for i in h["incidents"]]
    out = Path(args.dir) / REPORT
    write_text(out, render(args.template, "incidents_report.md.j2", {"s": s, "headline": headline(s)},
                           error=IncidentInputError))
    return [*lines, f"report: {out}", headline(s)]


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(PROG, lambda: "\n".join(run(args)))


if __name__ == "__main__":
    sys.exit(main())
