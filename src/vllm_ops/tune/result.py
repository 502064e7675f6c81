"""What a tune found: the loaded variants judged against the baseline with the experiment's noise
band, the result in one line, the winner's settings for the inventory, what it cost.

The tune's directory (``artifacts/<host>/<tune-id>/``) holds ``tune.json`` (the role's record: the
path the profile took, the loads it timed, whether it stopped the service and applied a winner,
the downtime record, the load sent), ``plan.json`` (:mod:`.plan`), ``prescreen.json``
(:mod:`.prescreen`), ``profile/`` (the capture and its campaign report, when it profiled) and
``experiment/`` (the benchmark's record and results, read by :mod:`vllm_ops.experiment`: the
same figures, the same noise rule, the same ranking as an experiment's).

Definitions (:func:`analyze`):

- **winner**: the first of the experiment's ranking when its category is ``better`` (one headline
  metric better beyond the noise band, none worse); else none.
- **measured_ms**: the winner's median TPOT minus the baseline's at the lowest concurrency (the
  centers of :mod:`vllm_ops.experiment.analysis`); **expected_ms**: minus what the plan expected it to
  recover (:mod:`.prescreen`), or None.
- **result**: ``tested: `SETTINGS` TPOT -4.1% (+/-1.2%) at concurrency 1, expected -3.0 ms, measured
  -2.7 ms`` (SETTINGS: what the winner changes from the unit's settings), or ``no tested change
  helps`` with why, and, where the summary has a decode ledger, ``the step is within N% of its
  floor`` (N = headroom / floor, the ledger's figures).
- **model_loads**: the loads the job recorded (the skeleton's ``job.json``, written before the
  report, the restore's load included: every load the vllm role made, a failed winner's deployment
  and its rollback too); without a ``job.json``, the loads the tune timed (the profiling variant's,
  each variant's, the winner's deployment) plus the normal service's load at the end where the
  tune stopped the service and applied no winner. **downtime**: the health poller's record.
  **wall**: from the job's start to the report. **prescreened**: candidates run on the floor, and
  how many it kept.
- **the report's model_loads** (beside ``costs``' count): each load phase by phase and against the
  disk's floor, from the skeleton's ``job.json`` (:func:`vllm_ops.loadcost.read_job`), as every job's
  report shows them; None without a ``job.json``.
- **drift**: the baseline measured again after the restore (the role does so where the restore
  loaded the normal service anyway: the tune loaded something, applied no winner and did not fail),
  round 2 against round 1 by the experiment's noise rule (:func:`vllm_ops.experiment.analysis.drift`;
  both rounds are then pooled as the baseline every variant is compared with). ``measured``;
  ``drifted``: the experiment's words for the largest drift outside its noise (``baseline drifted
  +3.1% (TPOT at 1)``), else None; ``words``: that, or that the baseline held, or why it was not
  measured again. A drift goes into the headline, and beside a winner it is a warning: the
  winner's gain may be the host's drift.
- **warnings**: a speculative-decoding variant measured on random tokens (they make n-gram and draft
  models accept almost nothing: give a prompts file), a variant that failed to load or serve, a
  candidate left unloaded by the budget, a winner named while the baseline drifted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from .. import loadcost
from ..artifacts import write_json, write_text
from ..cliutil import read_json
from ..experiment import build_report, load_experiment
from ..experiment.analysis import TPOT, drift_measured, point_words
from ..job import JobInputError, downtime_text, duration
from ..records import RecordError, SummaryRecord, TuneRecord
from ..records.tune import TUNE_JSON
from .errors import TuneInputError

SCHEMA = "vllm-ops/tune-report/1"
EXPERIMENT_DIR = "experiment"


def _read(path: Path, what: str, required: bool = True):
    if not path.exists() and not required:
        return None
    return read_json(path, what, TuneInputError, missing="no such file; the tune role writes it")


def merged_settings(unit: Mapping, variant: Mapping) -> dict:
    """The normal service's settings with ``variant`` laid over them: the environment (a null value
    unsets a variable) and the arguments after the unit's, as the vllm role runs a variant."""
    env = {**dict(unit.get("environment") or {}), **dict(variant.get("environment") or {})}
    return {"environment": {k: v for k, v in env.items() if v is not None},
            "extra_args": [*list(unit.get("extra_args") or []), *list(variant.get("extra_args") or [])]}


def winner(report: Mapping | None) -> dict | None:
    """The experiment report's winner entry (see the module's docstring), or None."""
    if not report or not report["ranking"] or report["ranking"][0]["category"] != "better":
        return None
    name = report["ranking"][0]["name"]
    return next(v for v in report["variants"] if v["name"] == name)


def _center(entry: Mapping, concurrency: int) -> float | None:
    point = next((p for p in entry["points"] if p["concurrency"] == concurrency), None)
    return None if point is None else point["metrics"][TPOT]["center"]


def host_vars_text(tune_id: str, host: str, result: str, settings: Mapping) -> str:
    """The winner's settings as a host_vars file for the inventory (JSON strings are YAML)."""
    lines = ["---", f"# The winner of tune {tune_id} on {host}: {result}.",
             f"# Put it in the inventory as host_vars/{host}/vllm_tune.yml: it replaces vllm_environment and",
             "# vllm_extra_args for this host, so deploy.yml and restore.yml keep the winner.", "vllm_environment:"]
    env = settings["environment"]
    lines += [f"  {k}: {json.dumps(str(v))}" for k, v in env.items()] if env else ["  {}"]
    if not env:
        lines[-2:] = ["vllm_environment: {}"]
    lines.append("vllm_extra_args:" if settings["extra_args"] else "vllm_extra_args: []")
    lines += [f"  - {json.dumps(str(a))}" for a in settings["extra_args"]]
    return "\n".join(lines) + "\n"


def rollout_change(win: Mapping) -> dict:
    """The winner as ``rollout.yml``'s change (``vllm_rollout_change``): its name and its own environment
    and arguments, which a rollout lays over each host's settings as the experiment laid them over the
    tuned host's."""
    return {"name": win["name"], "environment": dict(win.get("environment") or {}),
            "extra_args": list(win.get("extra_args") or [])}


def rollout_change_text(tune_id: str, host: str, change: Mapping) -> str:
    """``rollout_change.yml``: the extra-vars file that rolls the winner over the fleet."""
    header = (f"---\n# The winner of tune {tune_id} on {host}, as a rollout's change: the canary first, gated on\n"
              "# performance, each host rolled back to its last-known-good if it does not take it:\n"
              "#   ansible-playbook -i inventory/<env> rollout.yml -e @rollout_change.yml\n")
    return header + json.dumps({"vllm_rollout_change": change}, indent=2) + "\n"


def load_words(load: Mapping) -> str:
    """The load the benchmark sent, in words."""
    temperature = load.get("temperature")
    temp = f"temperature {temperature:g}" if isinstance(temperature, (int, float)) else "the server's temperature"
    if load.get("prompts_file"):
        count = f" ({load['prompts']} prompt(s))" if load.get("prompts") is not None else ""
        what = f"the prompts of {load['prompts_file']}{count}, {load.get('output_len')} output tokens each"
    elif load.get("traffic"):
        speed = float(load.get("traffic_speed") or 1)
        return (f"the replay of {load['traffic']}{f' at {speed:g}x' if speed != 1 else ''} (its requests at their "
                f"recorded times, lengths and shared prefixes; random tokens), {temp}, {load.get('repeats')} repeat(s)")
    else:
        what = f"random tokens, {load.get('input_len')} in and {load.get('output_len')} out"
    return (f"{what}, {temp}, {load.get('num_prompts')} requests per point at concurrency "
            f"{', '.join(str(c) for c in load.get('concurrencies') or [])}, {load.get('repeats')} repeat(s)")


def _speculates(entry: Mapping) -> bool:
    return any(str(a).startswith("--speculative-config") for a in entry.get("extra_args") or [])


def read_summary(path: str | Path) -> dict:
    """A trace summary (:class:`vllm_ops.records.SummaryRecord`), as a dict of its fields."""
    try:
        return SummaryRecord.load(path).to_dict()
    except RecordError as exc:
        raise TuneInputError(str(exc)) from None


def profile_summary(path: Path) -> dict:
    """``{verdict, headroom_pct}`` of the tune's own profile: the verdict in words and, where the
    summary has a decode ledger, the largest headroom over floor of a rank, in % of that floor."""
    if not path.exists():
        return {}
    from ..traces.words import describe

    summary = read_summary(path)
    out = {"verdict": describe(summary.get("verdict") or {}), "headroom_pct": None}
    ranks = (summary.get("ledger") or {}).get("ranks") or []  # the record's ledger: an object or null
    pcts = [100 * r["headroom_ms"] / r["floors"]["total"] for r in ranks
            if isinstance(r.get("headroom_ms"), (int, float)) and (r.get("floors") or {}).get("total")]
    out["headroom_pct"] = round(max(pcts), 1) if pcts else None
    return out


def analyze(directory: str | Path) -> dict:
    """The tune's report (``report.json``'s layout, schema :data:`SCHEMA`) of ``directory``."""
    d = Path(directory)
    try:
        record = TuneRecord.load(d / TUNE_JSON).to_dict()
    except RecordError as exc:
        raise TuneInputError(str(exc)) from None
    plan = _read(d / "plan.json", "tune plan", required=False) or {}
    screened = _read(d / "prescreen.json", "pre-screen", required=False)
    exp_report = None
    if (d / EXPERIMENT_DIR / "experiment.json").exists():
        exp_report = build_report([load_experiment(d / EXPERIMENT_DIR)])
    host, tune_id = record.get("host"), record.get("id")
    unit = plan.get("unit") or {"environment": {}, "extra_args": []}
    win = winner(exp_report)
    expected_by = {c["name"]: c.get("expected_ms") for c in (screened or {}).get("load") or []}
    summary = profile_summary(d / "profile" / "summary.json")
    warnings, result_tail = [], None
    out_winner = None
    if win is not None:
        tpot = win["headline"]["tpot"]
        conc = tpot["concurrency"]
        base = exp_report["baselines"][0]
        base_c, win_c = _center(base, conc), _center(win, conc)
        measured = None if base_c is None or win_c is None else round(win_c - base_c, 4)
        expected = expected_by.get(win["name"])
        expected = None if expected is None else round(-float(expected), 4)
        changes = next((c["settings"] for c in plan.get("candidates") or [] if c["name"] == win["name"]),
                       win["settings"])
        if tpot["verdict"] == "better":
            result = (f"tested: `{changes}` TPOT {tpot['change_pct']:+.1f}% (+/-{tpot['noise_pct']:.1f}%) "
                      f"{point_words(conc)}, "
                      + (f"expected {expected:.1f} ms, " if expected is not None else "expected: not estimated, ")
                      + (f"measured {measured:.1f} ms" if measured is not None else "measured: -"))
        else:
            thr = win["headline"]["throughput"]
            result = (f"tested: `{changes}` throughput {thr['change_pct']:+.1f}% (+/-{thr['noise_pct']:.1f}%) "
                      f"{point_words(thr['concurrency'])}; TPOT no change (+/-{tpot['noise_pct']:.1f}%) "
                      f"{point_words(conc)}")
        settings = merged_settings(unit, win)
        out_winner = {"name": win["name"], "changes": changes, "settings": settings, "expected_ms": expected,
                      "measured_ms": measured, "tpot": tpot, "throughput": win["headline"]["throughput"],
                      "rollout_change": rollout_change(win)}
    else:
        tested = len((exp_report or {}).get("variants") or [])
        if tested:
            why = f"{tested} variant(s) tested, none better beyond the noise"
        elif plan.get("candidates"):
            why = ("the pre-screen kept none of the candidates" if screened and not screened["load"]
                   else "no variant was loaded")
        else:
            why = "the plan has no server variant to test"
        result = f"no tested change helps ({why})"
        headroom = summary.get("headroom_pct")
        result_tail = (f"the step is within {headroom:.0f}% of its floor" if isinstance(headroom, (int, float))
                       else "its floor is not measured (no decode ledger in the summary)")
        result = f"{result}; {result_tail}"
    drift = baseline_drift(exp_report, record)
    if drift["drifted"] and out_winner:
        warnings.append(f"the {drift['drifted']} between the tune's start and its end: the winner's gain may be "
                        "the host's drift; measure again (an experiment of the winner) before rolling it out")
    load = record.get("load") or {}
    for v in (exp_report or {}).get("variants") or []:
        if _speculates(v) and not load.get("prompts_file"):
            warnings.append(f"{v['name']}: speculative decoding was measured on random tokens, on which n-gram and "
                            "draft models accept almost nothing: give a prompts file (the text users send: the "
                            "load's prompts_file, vllm_tune_bench_load or vllm_bench_load) to judge it")
        if v["status"] == "failed":
            f = v.get("failure") or {}
            warnings.append(f"{v['name']} failed to {f.get('stage') or 'load'}: "
                            f"{f.get('message') or 'see its journal'}")
    for n in (screened or {}).get("not_loaded") or []:
        warnings.append(f"{n['name']} not loaded: {n['why']}")
    loads = record.get("loads") or []
    job_loads = loadcost.read_job(d)
    try:
        downtime = downtime_text(record.get("downtime"))
        wall = duration(record["started_at"], record["finished_at"]) if record.get("finished_at") else None
    except (JobInputError, KeyError) as exc:
        raise TuneInputError(f"{d / 'tune.json'}: {exc}") from None
    screen = screened or {"screened": [], "counts": {}, "load": [], "not_loaded": []}
    model_loads, timed = _counted_loads(record, job_loads)
    costs = {"model_loads": model_loads, "loads": loads, "downtime": downtime,
             "downtime_s": (record.get("downtime") or {}).get("seconds_not_ready"), "wall": wall,
             "prescreened": len(screen["screened"]), "kept": screen["counts"].get("kept", 0),
             "loaded": sum(1 for x in loads if x.get("what") == "variant")}
    costs["loads_words"] = f"{model_loads}" + (f" ({', '.join(timed)})" if timed else "")
    cost_words = (f"cost {model_loads} model load(s)" + (f", {downtime}" if downtime else "")
                  + (f", {wall} in all" if wall else ""))
    report = {
        "schema": SCHEMA, "id": tune_id, "host": host, "dir": str(d), "started_at": record.get("started_at"),
        "finished_at": record.get("finished_at"), "profile_path": record.get("profile_path"),
        "verdict": summary.get("verdict"), "plan": plan, "prescreen": screened, "experiment": exp_report,
        "winner": out_winner, "result": result, "drift": drift, "applied": record.get("applied"), "load": load,
        "load_words": load_words(load) if load else None, "warnings": warnings, "costs": costs,
        "cost_words": cost_words, "error": record.get("error"), "model_loads": job_loads,
        "host_vars": "host_vars.yml" if out_winner else None,
        "rollout_change": "rollout_change.yml" if out_winner else None,
    }
    pre_words = _prescreen_words(screen)
    report["headline"] = "; ".join(p for p in (f"{host}: {result}", drift["drifted"], pre_words, cost_words) if p) + \
        f" -> {d / 'report.md'}"
    return report


def baseline_drift(exp_report: Mapping | None, record: Mapping) -> dict:
    """The baseline measured again after the restore, or why not (see the module's docstring)."""
    exp = ((exp_report or {}).get("experiments") or [{}])[0]
    if drift_measured(exp.get("drift") or []):
        drifted = exp.get("drifted")
        return {"measured": True, "drifted": drifted,
                "words": drifted or "the baseline held within its noise, measured again after the restore"}
    if record.get("drift_error"):
        why = f"the benchmark after the restore failed: {record['drift_error']}"
    elif record.get("error"):
        why = "the tune stopped early"
    elif record.get("applied"):
        why = "the winner was deployed, so the old settings were not up again"
    elif not record.get("loads"):
        why = "nothing was loaded, the service ran throughout"
    else:
        why = "no second measurement was recorded"
    return {"measured": False, "drifted": None, "words": f"the baseline was measured once ({why})"}


def _prescreen_words(screen: Mapping) -> str | None:
    if not screen["screened"]:
        return None
    out = [s for s in screen["screened"] if s["state"] != "kept"]
    text = f"{len(screen['screened'])} pre-screened, {screen['counts'].get('kept', 0)} kept"
    if out:
        text += " (" + ", ".join(f"{s['name']} {s['state']}" for s in out) + ")"
    return text


def write_outputs(report: Mapping, directory: str | Path) -> list[str]:
    """report.json and, with a winner, host_vars.yml and rollout_change.yml; the paths written."""
    d = Path(directory)
    paths = [str(write_json(d / "report.json", report))]
    if report["winner"]:
        paths.append(str(write_text(d / "host_vars.yml", host_vars_text(report["id"], report["host"], report["result"],
                                                                         report["winner"]["settings"]))))
        paths.append(str(write_text(d / "rollout_change.yml", rollout_change_text(
            report["id"], report["host"], report["winner"]["rollout_change"]))))
    return paths


def _counted_loads(record: Mapping, job_loads: Mapping | None) -> tuple[int, list[str]]:
    """The tune's model loads and each in words (the module docstring's **model_loads**): the job's
    record where it has one, else what ``tune.json`` timed."""
    if job_loads is not None:
        return job_loads["count"], [
            (x.get("what") or (f"variant {x['variant']}" if x.get("variant") else "the normal service"))
            + (f" {x['total_s']:.1f} s" if isinstance(x.get("total_s"), (int, float)) else "")
            + ("" if x.get("ready") else " (did not get ready)") for x in job_loads["loads"]]
    loads = record.get("loads") or []
    timed = [f"{x.get('what')} {x.get('name')} {x['seconds']:.1f} s" for x in loads
             if isinstance(x.get("seconds"), (int, float))]
    back = bool(record.get("stopped") and not record.get("applied"))
    return len(loads) + back, timed + (["the normal service back"] if back else [])
