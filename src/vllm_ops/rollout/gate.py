"""The canary's performance gate: the change measured against the service it replaces.

The canary's job directory is an experiment's (``experiment.json`` and ``bench/``, read by
:func:`vllm_ops.experiment.load_experiment`): the running service benchmarked as it runs is the
``baseline`` (round 1), the same load after the change the variant ``change``; each point's
figures and its comparison with the baseline are the experiment's (:mod:`vllm_ops.experiment.analysis`:
the center is the median over the repeats, the change ``c_change / c_baseline - 1`` and the noise
band the two sides' largest distances from their centers over the baseline's center, never below the
noise floor; a change inside the band is "no change").

The gate, at every concurrency of the load, with ``m`` = ``vllm_rollout_max_regression_pct``:

- **TPOT** (``median_tpot_ms``) regressed: the experiment calls it "worse" (outside the noise band)
  and it rose by more than ``m`` percent;
- **throughput** (``output_throughput``) regressed: "worse" and it fell by more than ``m`` percent;
- **errors** regressed: the share of failed requests (failed / (completed + failed), over the
  point's runs) rose by more than ``m`` percentage points;
- a point of the change that completed no request regressed ("failed"); a point whose baseline
  completed none cannot be judged, and fails the gate too ("not compared").

The gate passes when no point regressed and every band is narrow enough to see a regression of
``m`` percent. A regression inside the noise band is no evidence, so where the TPOT or throughput
band is wider than ``m`` the gate cannot tell: it is **inconclusive** and fails closed (the
rollout stops, the canary goes back), unless ``accept_inconclusive``
(``-e vllm_rollout_accept_inconclusive=true``) lets it pass, which its line then says. More
repeats or requests narrow the band. ``verdict`` is ``passed``, ``regressed``, ``inconclusive`` or
``passed, inconclusive accepted``.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..experiment.analysis import THROUGHPUT, TPOT, analyze_host, point_words
from .errors import RolloutInputError

__all__ = ["CHANGE", "SCHEMA", "error_share", "gate"]

SCHEMA = "vllm-ops/rollout-gate/1"
CHANGE = "change"  # the variant name of the canary's measurement after the change


def error_share(point: Mapping) -> float | None:
    """Percent of the point's requests that failed, None without any request."""
    total = point["completed"] + point["failed_requests"]
    return 100 * point["failed_requests"] / total if total else None


def _metric(base: Mapping, point: Mapping, metric: str, worse_sign: int, max_pct: float) -> dict:
    cmp = point["comparison"][metric]
    change = cmp["change_pct"]
    regressed = cmp["verdict"] == "failed" or (
        cmp["verdict"] == "worse" and change is not None and worse_sign * change > max_pct)
    return {"baseline": base["metrics"][metric]["center"], "change": point["metrics"][metric]["center"],
            "change_pct": change, "noise_pct": cmp["noise_pct"], "verdict": cmp["verdict"], "regressed": regressed}


def gate(exp: Mapping, max_regression_pct: float, accept_inconclusive: bool = False) -> dict:
    """The gate's figures and verdict for one canary's experiment dict (``load_experiment``'s)."""
    if max_regression_pct < 0:
        raise RolloutInputError(f"the largest regression allowed must be 0 or more, got {max_regression_pct}")
    analysis = analyze_host(exp)
    changed = [v for v in analysis["variants"] if v["name"] == CHANGE]
    if not changed:
        raise RolloutInputError(f"{exp['dir']}/experiment.json has no variant named {CHANGE!r}: is this a "
                                "rollout canary's measurement?")
    variant = changed[0]
    points, regressions, warnings, inconclusive = [], [], [], []
    for base, point in zip(analysis["baseline"]["points"], variant["points"], strict=True):
        c = point["concurrency"]
        at = point_words(c)
        tpot = _metric(base, point, TPOT, +1, max_regression_pct)
        thr = _metric(base, point, THROUGHPUT, -1, max_regression_pct)
        before, after = error_share(base), error_share(point)
        errors = {"baseline_pct": before, "change_pct": after,
                  "regressed": before is not None and after is not None and after - before > max_regression_pct}
        not_compared = "not compared" in (tpot["verdict"], thr["verdict"])
        invalid = [(who, p) for who, p in (("baseline", base), ("change", point)) if p["status"] == "invalid"]
        if invalid:
            # a replay that did not reproduce the recording measured something else: nothing to judge by
            regressions += [f"the {who}'s replays did not reproduce the recording, so the gate cannot judge "
                            f"the change: {'; '.join(p['invalid'])}" for who, p in invalid]
        elif point["status"] != "ok":
            regressions.append(f"the change completed no request {at}")
        elif not_compared:
            regressions.append(f"the baseline completed no request {at}: nothing to compare with")
        for name, fig, word in (("TPOT", tpot, "rose"), ("throughput", thr, "fell")):
            if fig["regressed"] and fig["verdict"] != "failed":
                regressions.append(f"{name} {word} {abs(fig['change_pct']):.1f}% {at} "
                                   f"(noise ±{fig['noise_pct']:.1f}%)")
            if fig["noise_pct"] is not None and fig["noise_pct"] > max_regression_pct and not fig["regressed"]:
                inconclusive.append(f"the {name} noise band {at} (±{fig['noise_pct']:.1f}%) is wider "
                                    f"than the largest regression allowed ({max_regression_pct:g}%)")
        if errors["regressed"]:
            regressions.append(f"failed requests rose from {before:.1f}% to {after:.1f}% {at}")
        points.append({"concurrency": c, "status": point["status"], "tpot": tpot, "throughput": thr,
                       "errors": errors, "runs": {"baseline": base["runs"], "change": point["runs"]}})
    if regressions:
        verdict = "regressed"
    elif inconclusive:
        verdict = "passed, inconclusive accepted" if accept_inconclusive else "inconclusive"
    else:
        verdict = "passed"
    for reason in inconclusive:
        warnings.append(f"{reason}: a regression of that size would read as no change; more repeats or requests "
                        "narrow the band")
    conc = [p["concurrency"] for p in points]
    lo, hi = points[conc.index(min(conc))], points[conc.index(max(conc))]
    return {"schema": SCHEMA, "host": exp["host"], "id": exp["id"], "passed": verdict.startswith("passed"),
            "verdict": verdict, "max_regression_pct": max_regression_pct, "noise_floor_pct": exp["noise_floor_pct"],
            "load": dict(exp["load"]), "points": points, "regressions": regressions, "inconclusive": inconclusive,
            "accept_inconclusive": accept_inconclusive, "warnings": warnings,
            "line": gate_line(exp["host"], lo, hi, points, verdict, max_regression_pct, regressions, inconclusive)}


def _fig(name: str, fig: Mapping, c: int) -> str:
    if fig["change_pct"] is None:
        return f"{name} not compared {point_words(c)}"
    return f"{name} {fig['change_pct']:+.1f}% (noise ±{fig['noise_pct']:.1f}%) {point_words(c)}"


def gate_line(host: str, lo: Mapping, hi: Mapping, points: list, verdict: str, max_pct: float,
              regressions: list, inconclusive: list) -> str:
    """``canary H: TPOT +1.2% (noise ±3.0%) at concurrency 1, throughput -0.8% (noise ±2.5%) at concurrency 8,
    failed requests 0.0% -> 0.0%: passed (at most 5% worse)``; a regression's reasons after ``regressed:``,
    an inconclusive gate's after ``inconclusive:`` with the way to narrow the band or accept it."""
    shares = [(p["errors"]["baseline_pct"], p["errors"]["change_pct"]) for p in points]
    before = max((b for b, _ in shares if b is not None), default=None)
    after = max((a for _, a in shares if a is not None), default=None)
    errors = ("failed requests " + (f"{before:.1f}%" if before is not None else "n/a") + " -> "
              + (f"{after:.1f}%" if after is not None else "n/a"))
    figures = (f"{_fig('TPOT', lo['tpot'], lo['concurrency'])}, "
               f"{_fig('throughput', hi['throughput'], hi['concurrency'])}")
    words = {
        "passed": f"passed (at most {max_pct:g}% worse)",
        "regressed": "regressed: " + "; ".join(regressions),
        "inconclusive": ("inconclusive: " + "; ".join(inconclusive) + ": the gate cannot see a regression of "
                         f"{max_pct:g}% through that noise. More repeats or requests narrow the band "
                         "(the load's repeats and num_prompts, vllm_rollout_bench_load); "
                         "-e vllm_rollout_accept_inconclusive=true lets it pass"),
        "passed, inconclusive accepted": (f"passed (at most {max_pct:g}% worse), inconclusive accepted "
                                          "(vllm_rollout_accept_inconclusive): " + "; ".join(inconclusive)),
    }
    return f"canary {host}: {figures}, {errors}: {words[verdict]}"
