"""``report.json``: one experiment (one host) or a fleet's (several hosts, one baseline each), in
one stable layout that the Markdown template, the CSV and the charts read.

Layout (``schema`` ``vllm-ops/experiment-report/1``; a changed meaning is a new schema)::

    schema, kind ("host" | "fleet"), id, hosts [str], started_at, finished_at (earliest, latest),
    model, vllm_version, load {input_len, output_len, num_prompts, concurrencies, repeats, warmups},
    noise_floor_pct (the first host's; each host's own is in experiments[]),
    noise_rule (the rule in one paragraph), headline_metrics {tpot, throughput: {metric, concurrency}},
    experiments [{host, dir, id, started_at, finished_at, duration, downtime (the health poller's
                  record in words, "downtime 95.0 s in 4 gaps (longest 31.0 s)", or null), model, vllm_version,
                  noise_floor_pct, base {environment, extra_args, settings}, drift [DRIFT], drifted,
                  model_loads (the job's loads, vllm_ops.loadcost.summary; null without job.json)}],
    baselines [ENTRY] (one per host, in host order), variants [ENTRY] (input order, host by host),
    ranking [{rank, name, host, label, category, settings, tpot CMP, throughput CMP}],
    counts {category: n}, failures [{label, name, host, stage, message, journal [str]}],
    warnings [str], spec_decode (whether any point has drafts), cost {...}, charts {throughput, tpot},
    headline (str)

    ENTRY = {name, host, label ("name @ host"), is_baseline, settings, environment, extra_args,
             profile, status ("ok" | "failed"), failure, category, points [POINT], warnings,
             headline {tpot, throughput: CMP + concurrency}, profile_report, profile_headline
             (variants: a profiled variant's campaign report, relative to its experiment, and
             headline; else null), measured (baselines), load (its server's last load in the job,
             vllm_ops.loadcost.time_to_ready: {n, ready, total_s, words, against_words}; the
             baseline's is the normal service's; null: none recorded)}
    POINT = {concurrency, status ("ok" | "failed" | "not measured"), runs, completed,
             failed_requests, metrics {METRIC: {values, center, min, max}},
             spec_decode {drafts, draft_tokens, accepted_tokens, acceptance, mean_accepted_length},
             preemptions, files, comparison {METRIC: CMP} (variants only)}
    CMP   = {change_pct, noise_pct, verdict ("better" | "worse" | "no change" | "failed" | "not compared")}
    DRIFT = {concurrency, tpot, throughput: {round1, round2, change_pct, noise_pct, drifted}}

Figures are defined in :mod:`.analysis`; null is a figure that was not measured, never a zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from .. import loadcost
from ..job import JobInputError, duration_words
from ..job import downtime_text as _downtime_words
from .analysis import CATEGORY_ORDER, THROUGHPUT, TPOT, analyze_host, point_words, rank_key
from .errors import ExperimentInputError
from .headline import drift_text, headline
from .settings import settings_text

SCHEMA = "vllm-ops/experiment-report/1"
LOAD_MINUTES = 30  # one model load on the real host, roughly: the cost of each variant
NOISE_RULE = (
    "For each metric at each concurrency the change is the variant's center (median over its runs) "
    "divided by the baseline's center (median over both baseline rounds) minus 1. The noise band is the "
    "largest distance of a baseline run from the baseline's center plus the largest distance of a variant "
    "run from the variant's center, divided by the baseline's center, and never less than the noise floor "
    "({floor}%). A change inside the band is reported as \"no change\", never as a win; outside it, lower "
    "is better for latencies and higher for throughput. The baseline's drift (end against start) is judged "
    "by the same rule."
)


def _time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _duration(start: str | None, end: str | None) -> str | None:
    a, b = _time(start), _time(end)
    if a is None or b is None or b < a:
        return None
    return duration_words((b - a).total_seconds())


def downtime_text(downtime: Mapping | None) -> str | None:
    """The job's words for a health poller's record (:func:`vllm_ops.job.downtime_text`)."""
    try:
        return _downtime_words(downtime)
    except JobInputError as exc:
        raise ExperimentInputError(f"experiment.json: downtime: {exc}") from None


def replay_summary(experiments: list[Mapping], entries: list[Mapping]) -> dict | None:
    """Which recording the load replayed and whether the replays reproduced it, or None (not a replay):
    ``{traffic, speed, requests, span_s, block, input_tokens, output_tokens, left_out, versions, runs,
    invalid_runs, valid, words}``."""
    first = experiments[0]
    if not first["load"].get("traffic"):
        return None
    exp = first.get("replay") or {}
    runs = sum(p["runs"] for e in entries for p in e["points"])
    invalid = sum(p["invalid_runs"] for e in entries for p in e["points"])
    speed = float(first["load"].get("traffic_speed") or 1)
    words = (f"the replay of {first['load']['traffic']}: {exp.get('requests')} requests over "
             f"{exp.get('span_s', 0):.0f} s{f' at {speed:g}x the recorded pace' if speed != 1 else ''}, "
             f"{exp.get('input_tokens')} prompt and {exp.get('output_tokens')} output tokens, blocks of "
             f"{exp.get('block')} tokens shared as recorded")
    fidelity = ("every replay reproduced the recording" if not invalid else
                f"{invalid} of {runs} replays did not reproduce the recording and are left out")
    return {"traffic": first["load"]["traffic"], "speed": speed,
            **{k: exp.get(k) for k in ("requests", "span_s", "block", "input_tokens", "output_tokens", "left_out",
                                       "versions", "sha256")},
            "runs": runs, "invalid_runs": invalid, "valid": runs > 0 and not invalid, "words": words,
            "fidelity": fidelity}


def build_report(experiments: list[Mapping]) -> dict:
    """The report of one host's experiment or of a fleet's (``load_experiment`` dicts, one per host,
    same id and concurrencies): each variant compared with its own host's baseline, all ranked together."""
    if not experiments:
        raise ExperimentInputError("no experiment to report on: give at least one experiment directory")
    first = experiments[0]
    hosts = [e["host"] for e in experiments]
    if len(set(hosts)) != len(hosts):
        raise ExperimentInputError(f"each host may appear once in a fleet report, got {hosts}; "
                                   "give one experiment directory per host")
    for e in experiments[1:]:
        if e["id"] != first["id"]:
            raise ExperimentInputError(f"{e['dir']}: experiment id {e['id']!r} differs from {first['id']!r} "
                                       f"({first['dir']}); combine only the hosts of one experiment")
        if e["load"]["concurrencies"] != first["load"]["concurrencies"]:
            raise ExperimentInputError(f"{e['dir']}: load.concurrencies {e['load']['concurrencies']} differ from "
                                       f"{first['load']['concurrencies']} ({first['dir']}); the hosts must run "
                                       "the same load")
    conc = first["load"]["concurrencies"]
    analyses = [analyze_host(e) for e in experiments]
    for e, a in zip(experiments, analyses, strict=True):
        # Each server's last load in the job (the baseline's: the normal service restored), for the lever
        # variants (a load format, the compile cache) whose point is their time to ready.
        for entry in [a["baseline"], *a["variants"]]:
            entry["load"] = loadcost.time_to_ready(e.get("model_loads"),
                                                   None if entry is a["baseline"] else entry["name"])
    baselines = [a["baseline"] for a in analyses]
    variants = [v for a in analyses for v in a["variants"]]
    order = sorted(range(len(variants)), key=lambda i: (rank_key(variants[i]), i))
    ranking = [{"rank": n + 1, "name": variants[i]["name"], "host": variants[i]["host"],
                "label": variants[i]["label"], "category": variants[i]["category"],
                "settings": variants[i]["settings"], "tpot": variants[i]["headline"]["tpot"],
                "throughput": variants[i]["headline"]["throughput"]} for n, i in enumerate(order)]
    fleet = len(experiments) > 1
    drifts = {e["host"]: a["drift"] for e, a in zip(experiments, analyses, strict=True)}
    failures = [{"label": v["label"], "name": v["name"], "host": v["host"], **v["failure"]}
                for v in [*baselines, *variants] if v["failure"]]
    for b in baselines:
        if not b["measured"]:
            failures.insert(0, {"label": b["label"], "name": b["name"], "host": b["host"], "stage": "benchmark",
                                "message": b["unmeasured"], "journal": []})
    repeats = first["load"].get("repeats")
    runs = sum(len(e["runs"]) for e in experiments)
    report = {
        "schema": SCHEMA, "kind": "fleet" if fleet else "host", "id": first["id"], "hosts": hosts,
        "started_at": min((e["started_at"] for e in experiments if e["started_at"]), default=None),
        "finished_at": max((e["finished_at"] for e in experiments if e["finished_at"]), default=None),
        "model": first["model"], "vllm_version": first["vllm_version"], "load": dict(first["load"]),
        "replay": replay_summary(experiments, [*baselines, *variants]),
        # not a replay, while a recording of a host's traffic was fetched beside the job: said with the load
        "recordings": {e["host"]: e["recording"] for e in experiments if e.get("recording")},
        # speculating variants beside their earlier figures on the other kind of load (the CLI's --history)
        "beside": [],
        "noise_floor_pct": first["noise_floor_pct"],
        "noise_rule": NOISE_RULE.format(floor=f"{first['noise_floor_pct']:g}"),
        "headline_metrics": {"tpot": {"metric": TPOT, "concurrency": min(conc), "words": point_words(min(conc))},
                             "throughput": {"metric": THROUGHPUT, "concurrency": max(conc),
                                            "words": point_words(max(conc))}},
        "experiments": [{
            "host": e["host"], "dir": e["dir"], "id": e["id"], "started_at": e["started_at"],
            "finished_at": e["finished_at"], "duration": _duration(e["started_at"], e["finished_at"]),
            "model": e["model"], "vllm_version": e["vllm_version"], "noise_floor_pct": e["noise_floor_pct"],
            "base": {**e["base"], "settings": settings_text(e["base"]["environment"], e["base"]["extra_args"],
                                                            baseline=True)},
            "drift": a["drift"], "drifted": drift_text(a["drift"]),
            "downtime": downtime_text(e.get("downtime")),
            "model_loads": e.get("model_loads"),
        } for e, a in zip(experiments, analyses, strict=True)],
        "baselines": baselines, "variants": variants, "ranking": ranking,
        "counts": {c: sum(1 for v in variants if v["category"] == c) for c in CATEGORY_ORDER},
        "failures": failures,
        "warnings": [w for v in [*baselines, *variants] for w in v["warnings"]],
        "spec_decode": any(p["spec_decode"]["drafts"] for v in [*baselines, *variants] for p in v["points"]),
        "cost": {
            "variants": len(variants), "model_loads": len(variants) + len(experiments),
            "load_minutes_each": LOAD_MINUTES, "load_minutes_total": LOAD_MINUTES * (len(variants) + len(experiments)),
            "benchmark_points_per_variant": len(conc), "repeats": repeats,
            "warmups": first["load"].get("warmups"), "benchmark_runs": runs,
        },
        "charts": {"throughput": "throughput.png", "tpot": "tpot.png"},
    }
    report["headline"] = headline([variants[i] for i in order], baselines, drifts,
                                  label_key="label" if fleet else "name")
    return report
