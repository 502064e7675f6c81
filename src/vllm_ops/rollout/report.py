"""``report.json`` of a rollout: which hosts run what, the canary's gate with its noise, the downtime
of each host, in one stable layout that the Markdown template reads.

Inputs, in the rollout's directory (``<artifacts>/rollout/<rollout id>/``): ``hosts/<host>.json``, one
record per host the rollout reached, written by the role once the host is back on its last-known-good
(:mod:`vllm_ops.records.rollout_host` defines its fields, ``outcome`` among them); and each canary's
``gate.json``.

An entry's ``after`` is the read-back where there is one: {version (the executable's distribution,
else the server's /version), executable (its real path), read_back: true, pid}; the headline and the
page say "read back" beside it.

Layout (``schema`` ``vllm-ops/rollout-report/1``)::

    schema, id, change, hosts [str] (the play's order), stopped (bool), stopped_at (host | null),
    entries [{host, stage, outcome, status, reason (the job's error, whole), reason_line (its first
              line, at most 240 characters), restarted, before, after, downtime_s, downtime, job_dir,
              model_loads (the host job's loads, vllm_ops.loadcost.summary of its job.json | null)}]
             (one per host; a host the rollout did not reach has status "not reached"),
    canaries [CANARY] (every canary host in the play's order: one, or the hosts of a canary group),
    canary CANARY (the canary that stopped the rollout, else the first; {host: null, gate: null,
    drift: null} without one), counts {status: n}, headline (str)

    CANARY = {host, gate (its gate.json's content, vllm_ops.rollout.gate) | null, drift DRIFT | null}

    DRIFT (only where the canary's gate stopped the rollout): {measured, drifted, words}: the
    canary's old service, back after the rollback, measured again (round 2 of its experiment.json)
    and judged against round 1 by the experiment's noise rule (vllm_ops.experiment.analysis.drift);
    ``drifted`` is the experiment's words for a drift outside the noise (``baseline drifted +9.0%
    (TPOT at 1)``) or null; ``words`` what the report says: a drift makes the regression possibly
    the host's own, a baseline that held makes it the change's.

``status`` is the outcome in the report's words: ``changed`` or ``unchanged`` (kept, with or without a
restart), ``refused (nothing stopped)``, ``rolled back`` (did not load, regressed, inconclusive, smoke failed),
``failed``, ``not reached``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from .. import loadcost
from ..cliutil import read_json
from ..experiment import ExperimentInputError
from ..experiment.analysis import analyze_host, drift_measured
from ..experiment.headline import drift_text
from ..experiment.inputs import load_experiment
from ..job import downtime_text
from ..records import RecordError
from ..records.rollout_host import OUTCOMES, RolloutHostRecord
from .errors import RolloutInputError

__all__ = ["OUTCOMES", "SCHEMA", "build_report", "load_rollout", "status_of"]

SCHEMA = "vllm-ops/rollout-report/1"
ROLLED_BACK = ("did not load", "regressed", "inconclusive", "smoke failed")


def reason_line(error: str | None, limit: int = 240) -> str | None:
    """The first line of a job's error, cut to ``limit`` characters: the report's table shows that."""
    if not error:
        return None
    line = error.strip().splitlines()[0].split(" Last journal lines:")[0]
    return line if len(line) <= limit else line[:limit - 3].rstrip() + "..."


def status_of(outcome: str, restarted: bool) -> str:
    if outcome == "kept":
        return "changed" if restarted else "unchanged"
    if outcome == "refused":
        return "refused (nothing stopped)"
    return "rolled back" if outcome in ROLLED_BACK else "failed"


def _record(path: Path) -> dict:
    try:
        return RolloutHostRecord.load(path).to_dict()
    except RecordError as exc:
        raise RolloutInputError(str(exc)) from None


def load_rollout(directory: str | Path) -> dict:
    """The rollout directory's host records (by host) and each canary's gate (by host), checked."""
    d = Path(directory)
    hosts_dir = d / "hosts"
    if not hosts_dir.is_dir():
        raise RolloutInputError(f"{hosts_dir}: no such directory; is {d} a rollout's directory "
                                "(artifacts/rollout/<id>)?")
    records = {}
    for path in sorted(hosts_dir.glob("*.json")):
        record = _record(path)
        records[record["host"]] = record
    gates = {}
    for host, record in records.items():
        if record["stage"] == "canary" and record.get("gate"):
            gate_path = Path(record["gate"])
            if gate_path.exists():  # a canary refused before its measurement has none
                gates[host] = read_json(gate_path, "canary gate", RolloutInputError)
    return {"dir": str(d), "id": d.name, "records": records, "gates": gates}


def _runs(side: Mapping | None) -> str:
    if not side or not side.get("version"):
        return "not known"
    return (f"vLLM {side['version']}" + (f" ({side['executable']})" if side.get("executable") else "")
            + (", read back" if side.get("read_back") else ""))


def after_side(record: Mapping) -> Mapping | None:
    """What the host runs now: its last start's read-back (the process's own release and executable)
    where it has one, else the record's ``after`` (``/version`` and the unit's ``ExecStart``)."""
    readback = record.get("readback")
    if not isinstance(readback, Mapping) or not readback.get("pid"):
        return record.get("after")
    release = (readback.get("release") or {}).get("version") or readback.get("served_version")
    after = record.get("after") or {}
    return {"version": release or after.get("version"),
            "executable": readback.get("executable") or after.get("executable"),
            "read_back": True, "pid": readback["pid"]}


def build_report(rollout: Mapping, hosts: list[str]) -> dict:
    """The report dict of ``load_rollout``'s rollout over the play's ``hosts`` (in order; records of
    hosts not listed come after them)."""
    records = rollout["records"]
    order = list(hosts) + sorted(h for h in records if h not in hosts)
    entries = []
    for host in order:
        r = records.get(host)
        if r is None:
            entries.append({"host": host, "stage": None, "outcome": None, "status": "not reached", "reason": None,
                            "reason_line": None, "restarted": False, "before": None, "after": None, "downtime_s": None,
                            "downtime": None, "job_dir": None, "model_loads": None})
            continue
        downtime = r.get("downtime") or None
        entries.append({
            "host": host, "stage": r["stage"], "outcome": r["outcome"],
            "status": status_of(r["outcome"], bool(r.get("restarted"))), "reason": r.get("error") or None,
            "reason_line": reason_line(r.get("error")),
            "restarted": bool(r.get("restarted")), "before": r.get("before"), "after": after_side(r),
            "downtime_s": float(downtime["seconds_not_ready"]) if downtime else None,
            "downtime": downtime_text(downtime), "job_dir": r.get("job_dir"),
            "model_loads": loadcost.read_job(r["job_dir"]) if r.get("job_dir") else None})
    stopped = next((e for e in entries if e["outcome"] not in (None, "kept")), None)
    counts = {}
    for e in entries:
        counts[e["status"]] = counts.get(e["status"], 0) + 1
    change = next((r.get("change") for r in records.values() if r.get("change")), None)
    canaries = [{"host": e["host"], "gate": rollout["gates"].get(e["host"]), "drift": canary_drift(e)}
                for e in entries if e["stage"] == "canary"]
    at = stopped["host"] if stopped and stopped["stage"] == "canary" else None
    canary = next((c for c in canaries if c["host"] == at), canaries[0] if canaries else
                  {"host": None, "gate": None, "drift": None})
    report = {"schema": SCHEMA, "id": rollout["id"], "change": change, "hosts": order, "stopped": stopped is not None,
              "stopped_at": stopped["host"] if stopped else None, "entries": entries,
              "canaries": canaries, "canary": canary, "counts": counts}
    report["headline"] = headline(report)
    return report


def canary_drift(entry: Mapping | None) -> dict | None:
    """The canary's baseline measured again after its rollback (DRIFT of the module's docstring), or
    None where the gate did not stop the rollout."""
    if not entry or entry["outcome"] not in ("regressed", "inconclusive") or not entry.get("job_dir"):
        return None
    job_dir = Path(entry["job_dir"])
    if not (job_dir / "experiment.json").exists():
        return None
    try:
        drifts = analyze_host(load_experiment(job_dir))["drift"]
    except ExperimentInputError as exc:
        return {"measured": False, "drifted": None, "words": f"the canary's measurement could not be read again: {exc}"}
    if not drift_measured(drifts):
        return {"measured": False, "drifted": None,
                "words": "the baseline was not measured again after the rollback (its old service was not healthy, or "
                         "the benchmark failed): the regression cannot be told from the host's drift"}
    drifted = drift_text(drifts)
    words = (f"measured again after the rollback, the {drifted}: the regression may be the host's own drift; run "
             "the rollout again" if drifted else
             "measured again after the rollback, the baseline held within its noise: the regression is the change's")
    return {"measured": True, "drifted": drifted, "words": words}


def headline(report: Mapping) -> str:
    """One line: the rollout's end, the canary's gate, the downtime per host."""
    entries = report["entries"]
    gate = report["canary"]["gate"]
    reached = [e for e in entries if e["outcome"] is not None]
    downtime = ", ".join(f"{e['host']} {e['downtime_s']:.1f} s" for e in reached if e["downtime_s"] is not None)
    parts = []
    if report["stopped"]:
        stop = next(e for e in entries if e["host"] == report["stopped_at"])
        reasons = {"regressed": "regressions", "inconclusive": "inconclusive"}.get(stop["outcome"])
        reason = (stop["outcome"] + ": " + "; ".join(gate[reasons]) if reasons and gate and gate.get(reasons)
                  else stop["outcome"])
        where = "at the canary " if stop["stage"] == "canary" else "at "
        parts.append(f"rollout {report['id']} stopped {where}{stop['host']} ({reason}): {stop['host']} "
                     f"{stop['status']}, runs {_runs(stop['after'])}")
        missed = [e["host"] for e in entries if e["status"] == "not reached"]
        if missed:
            parts.append(f"not reached: {', '.join(missed)}")
    else:
        changed = [e for e in entries if e["outcome"] == "kept"]
        versions = "; ".join(sorted({_runs(e["after"]) for e in changed}))
        already = [e for e in changed if not e["restarted"]]
        if changed and len(already) == len(changed):
            parts.append(f"rollout {report['id']}: nothing to change: {len(changed)}/{len(entries)} hosts "
                         f"already ran it, none restarted ({versions})")
        else:
            parts.append(f"rollout {report['id']}: {len(changed)}/{len(entries)} hosts on the change ({versions})"
                         + (f", {len(already)} of them already ran it" if already else ""))
    # The gate of the canary that stopped the rollout (build_report's canary then), else every
    # canary's (a canary group has several).
    at_canary = report["stopped"] and report["canary"]["host"] == report["stopped_at"]
    shown = [report["canary"]] if at_canary else report["canaries"]
    for c in shown:
        if c.get("gate"):
            parts.append(c["gate"]["line"])
        if c.get("drift"):
            parts.append(c["drift"]["words"])
    if downtime:
        parts.append(f"downtime {downtime}")
    return "; ".join(parts)
