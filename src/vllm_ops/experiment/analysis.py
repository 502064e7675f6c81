"""The figures of an experiment, per variant (the baseline included) and concurrency, and how a
variant compares with its baseline. Every figure is defined here once.

Per point (a variant at one concurrency), for each metric of :data:`~.inputs.METRICS`: ``values``
(one per run with completed requests, in run order), ``center`` (their median), ``min``, ``max``.
A replay's run that did not reproduce the recording (its ``fidelity`` not valid) gives no value and
is counted in ``invalid_runs`` with its reason in ``invalid``; a point whose every run is so is
``invalid``, which compares with nothing (no verdict rests on it). ``completed`` and
``failed_requests`` are sums over the point's runs; ``preemptions`` sums the
``num_preemptions_total`` deltas; ``spec_decode.acceptance`` = accepted tokens / draft tokens and
``spec_decode.mean_accepted_length`` = 1 + accepted tokens / drafts, both sums over the runs and
null without drafts (no speculation, or the counters absent). A point whose runs completed no
request is ``failed``; a point without runs is ``not measured``. The baseline pools its two
rounds (start and end); its drift is the round-2 center against the round-1 center.

Noise rule. For a metric at a concurrency, with c_b the baseline's center and c_v the variant's,
the change is c_v / c_b - 1, and the noise band is (the largest |b - c_b| over the baseline's
runs + the largest |v - c_v| over the variant's runs) / c_b, never below noise_floor_pct / 100.
A change whose size is within the band (|change| <= band) is "no change", never a win; outside
it, the change is "better" or "worse" by the metric's direction (latencies: lower is better;
output throughput: higher is better). The baseline's drift is judged by the same rule, round 1
standing for the baseline and round 2 for the variant. A point that failed is "failed"; a point
without a baseline to compare with is "not compared".

Category of a variant, from its two headline metrics (median TPOT at the lowest concurrency,
output throughput at the highest): "failed" (the variant failed, or a headline point did),
"better" (at least one better, none worse), "worse" (at least one worse, none better),
"trade-off" (one better, one worse), "no change" (both inside the noise), "not compared" (no
baseline figure to compare with), "not run" (the experiment stopped before the variant). Ranking:
better (most negative TPOT change first, a TPOT inside the noise counting as 0, ties broken by the
larger throughput gain), then trade-off, no change, worse, not compared, failed, not run; input
order within equals.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

from .inputs import BASELINE, METRICS
from .load import REPLAY
from .settings import settings_text

TPOT = "median_tpot_ms"
THROUGHPUT = "output_throughput"
_EPS = 1e-12
UNMEASURED = "no baseline run completed a request"
CATEGORY_ORDER = ("better", "trade-off", "no change", "worse", "not compared", "failed", "not run")


def point_figures(runs: list[Mapping], concurrency: int) -> dict:
    """The figures of one point from its runs (``load_experiment``'s run dicts)."""
    invalid = [r for r in runs if not (r.get("fidelity") or {"valid": True})["valid"]]
    ok = [r for r in runs if r["result"]["completed"] > 0 and r not in invalid]
    metrics = {}
    for name in METRICS:
        values = [r["result"][name] for r in ok if r["result"][name] is not None]
        metrics[name] = {"values": values, "center": statistics.median(values) if values else None,
                         "min": min(values) if values else None, "max": max(values) if values else None}
    completed = sum(r["result"]["completed"] for r in runs)
    failed = sum(r["result"]["failed"] for r in runs)

    def counter(key: str) -> float | None:
        got = [r["metrics"][key] for r in runs if key in r["metrics"]]
        return sum(got) if got else None

    drafts = counter("spec_decode_num_drafts_total")
    draft_tokens = counter("spec_decode_num_draft_tokens_total")
    accepted = counter("spec_decode_num_accepted_tokens_total")
    spec = {
        "drafts": drafts, "draft_tokens": draft_tokens, "accepted_tokens": accepted,
        "acceptance": accepted / draft_tokens if accepted is not None and draft_tokens else None,
        "mean_accepted_length": 1 + accepted / drafts if accepted is not None and drafts else None,
    }
    status = "not measured" if not runs else ("ok" if completed > 0 else "failed")
    if status == "ok" and not ok:
        status = "invalid"
    return {"concurrency": concurrency, "status": status, "runs": len(runs), "completed": completed,
            "invalid_runs": len(invalid), "invalid": sorted({r["fidelity"]["message"] for r in invalid}),
            "failed_requests": failed, "metrics": metrics, "spec_decode": spec,
            "preemptions": counter("num_preemptions_total"), "files": [r["file"] for r in runs]}


def point_words(concurrency: int) -> str:
    """How a point is named in a sentence: ``at concurrency 8``, or a replay's ``on the replayed traffic``."""
    return "on the replayed traffic" if concurrency == REPLAY else f"at concurrency {concurrency}"


def compare(base: Mapping | None, var: Mapping | None, direction: str, floor_pct: float) -> dict:
    """The noise rule on two ``{values, center}`` figures. Returns ``{change_pct, noise_pct, verdict}``
    (percentages; verdict better/worse/no change, or "not compared" with null figures when either
    side has no center or the baseline's is 0)."""
    if not base or not var or base.get("center") is None or var.get("center") is None or not base["center"]:
        return {"change_pct": None, "noise_pct": None, "verdict": "not compared"}
    cb, cv = base["center"], var["center"]
    change = cv / cb - 1
    spread = max(abs(b - cb) for b in base["values"]) + max(abs(v - cv) for v in var["values"])
    band = max(spread / cb, floor_pct / 100)
    improved = (change < 0) == (direction == "lower")
    # _EPS: 101 / 100 - 1 is 0.01000...09 in floating point; a change exactly at the band is inside it
    verdict = "no change" if abs(change) <= band + _EPS else ("better" if improved else "worse")
    return {"change_pct": round(100 * change, 4), "noise_pct": round(100 * band, 4), "verdict": verdict}


def point_comparison(base: Mapping, point: Mapping, floor_pct: float, variant_failed: bool = False) -> dict:
    """Each metric of ``point`` against the baseline's point at the same concurrency; every metric of a
    failed point, or of a variant that failed, is "failed"."""
    if variant_failed or point["status"] == "failed":
        return {m: {"change_pct": None, "noise_pct": None, "verdict": "failed"} for m in METRICS}
    usable = base["status"] == "ok" and point["status"] == "ok"
    return {m: compare(base["metrics"][m] if usable else None, point["metrics"][m], d, floor_pct)
            for m, d in METRICS.items()}


def drift(round1: Mapping, round2: Mapping, floor_pct: float) -> dict:
    """The baseline's drift at one concurrency: round 2 against round 1, TPOT and throughput."""
    out = {"concurrency": round1["concurrency"]}
    for key, metric in (("tpot", TPOT), ("throughput", THROUGHPUT)):
        usable = round1["status"] == "ok" and round2["status"] == "ok"
        cmp = compare(round1["metrics"][metric] if usable else None,
                      round2["metrics"][metric] if usable else None, METRICS[metric], floor_pct)
        out[key] = {"round1": round1["metrics"][metric]["center"], "round2": round2["metrics"][metric]["center"],
                    "change_pct": cmp["change_pct"], "noise_pct": cmp["noise_pct"],
                    "drifted": cmp["verdict"] in ("better", "worse")}
    return out


def drift_measured(drifts: list[Mapping]) -> bool:
    """Whether the baseline was measured a second time (round 2 has a figure at some concurrency)."""
    return any(d[k]["round2"] is not None for d in drifts for k in ("tpot", "throughput"))


def category(status: str, tpot: Mapping, throughput: Mapping) -> str:
    """A variant's category from its status and its two headline comparisons (see the docstring)."""
    if status == "not run":
        return "not run"
    verdicts = (tpot["verdict"], throughput["verdict"])
    if status == "failed" or "failed" in verdicts:
        return "failed"
    if "not compared" in verdicts:
        return "not compared"
    better, worse = verdicts.count("better"), verdicts.count("worse")
    if better and worse:
        return "trade-off"
    if better:
        return "better"
    if worse:
        return "worse"
    return "no change"


def rank_key(entry: Mapping) -> tuple:
    """Sort key of a variant entry (``category`` and ``headline.tpot/throughput`` comparisons)."""
    tpot, thr = entry["headline"]["tpot"], entry["headline"]["throughput"]
    t = tpot["change_pct"] if tpot["verdict"] == "better" else 0.0
    p = thr["change_pct"] if thr["change_pct"] is not None else 0.0
    return (CATEGORY_ORDER.index(entry["category"]), t if entry["category"] == "better" else 0.0,
            -p if entry["category"] == "better" else 0.0)


def analyze_host(exp: Mapping) -> dict:
    """The baseline and variant entries of one host's experiment (``load_experiment``'s dict)."""
    conc = exp["load"]["concurrencies"]
    floor = exp["noise_floor_pct"]
    host = exp["host"]

    def runs_of(name: str, rnd: int | None = None) -> dict:
        return {c: [r for r in exp["runs"] if r["variant"] == name and r["concurrency"] == c
                    and (rnd is None or r["round"] == rnd)] for c in conc}

    base_runs = runs_of(BASELINE)
    base_points = [point_figures(base_runs[c], c) for c in conc]
    r1, r2 = runs_of(BASELINE, 1), runs_of(BASELINE, 2)
    drifts = [drift(point_figures(r1[c], c), point_figures(r2[c], c), floor) for c in conc]
    baseline = _entry(BASELINE, host, exp["base"]["environment"], exp["base"]["extra_args"], False, "ok", None,
                      base_points)
    baseline["measured"] = any(p["status"] == "ok" for p in base_points)
    # why not, in words the headline and the report's failures share
    baseline["unmeasured"] = None if baseline["measured"] else (
        "no baseline replay reproduced the recording" if any(p["status"] == "invalid" for p in base_points)
        else UNMEASURED)
    if not baseline["measured"]:
        baseline["status"] = "failed"
    baseline["category"] = "baseline"
    lo, hi = conc.index(min(conc)), conc.index(max(conc))
    variants = []
    for v in exp["variants"]:
        vr = runs_of(v["name"])
        points = [point_figures(vr[c], c) for c in conc]
        for bp, p in zip(base_points, points, strict=True):
            p["comparison"] = point_comparison(bp, p, floor, v["status"] == "failed")
        e = _entry(v["name"], host, v["environment"], v["extra_args"], v["profile"], v["status"], v["failure"],
                   points)
        e["profile_report"], e["profile_headline"] = v.get("profile_report"), v.get("profile_headline")
        e["headline"] = {"tpot": dict(points[lo]["comparison"][TPOT], concurrency=conc[lo]),
                         "throughput": dict(points[hi]["comparison"][THROUGHPUT], concurrency=conc[hi])}
        # every replay invalid: measured, but nothing to judge by ("not compared", its warnings say why)
        if v["status"] == "ok" and not any(p["status"] in ("ok", "invalid") for p in points):
            e["status"] = "failed"
            e["failure"] = {"stage": "benchmark", "message": "no run of this variant completed a request",
                            "journal": []}
        e["category"] = category(e["status"], e["headline"]["tpot"], e["headline"]["throughput"])
        variants.append(e)
    return {"baseline": baseline, "variants": variants, "drift": drifts}


def _entry(name: str, host: str, env: Mapping, args: list, profile: bool, status: str, failure, points) -> dict:
    warnings = [f"{name} on {host}: {p['failed_requests']} failed request{'s' if p['failed_requests'] != 1 else ''} "
                f"{point_words(p['concurrency'])} ({p['runs']} runs)" for p in points if p["failed_requests"] > 0]
    warnings += [f"{name} on {host}: {p['invalid_runs']} of {p['runs']} replays did not reproduce the recording, "
                 f"so their figures are left out: {'; '.join(p['invalid'])}" for p in points if p["invalid_runs"]]
    return {"name": name, "host": host, "label": f"{name} @ {host}", "is_baseline": name == BASELINE,
            "settings": settings_text(env, args, baseline=name == BASELINE), "environment": dict(env),
            "extra_args": list(args), "profile": profile, "status": status, "failure": failure,
            "points": points, "warnings": warnings}
