"""The pre-screen: which NCCL candidates beat the unit's own settings on the all-reduce floor, and
what, then, is loaded.

Each pre-screenable candidate of the plan was measured by ``allreduce_bench.py`` with its
environment laid over the unit's, right after the unit's own run (``allreduce-unit.json``), the
GPUs free. At the **screen size** (the smallest decode batch size the floor measured, batch 1 where
it did: the message of single-stream decode, what TPOT at concurrency 1 pays; else the smallest
size), with the unit's median ``u`` and spread ``[u_min, u_p90]`` (its loops' min and p90) and the
candidate's median ``c`` and p90 ``c_p90``:

- ``ratio`` = c / u;
- **kept** when ``c_p90 < u_min``: the candidate's loops lie wholly below the unit's, so it beats
  the unit beyond the floor's noise;
- else **same** when ``u_min <= c <= u_p90`` (inside the unit's spread), **slower** when ratio > 1,
  **within noise** when it is faster but its spread reaches the unit's; **failed** when its run
  failed (the script's message).

``expected_ms`` of a kept candidate = (1 - ratio) x the trace's all-reduce transfer per step (the
verdict's ``allreduce_transfer_ms``): the milliseconds a step would save if the served all-reduce
moved as the floor did; without a trace, the test's own figure (the ledger's), else None.

**What is loaded** (:func:`screen`'s ``load``): the kept candidates and those no floor can
pre-screen, best first: the largest ``expected_ms`` first, those without one after them in the
plan's order; the first ``max_loads``. The others are ``not_loaded``, with why.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..allreduce import AllreduceInputError, load_floor
from .errors import TuneInputError


def screen_size(unit: Mapping) -> dict:
    """The row of the unit's floor the pre-screen compares (see the module's docstring)."""
    rows = unit["sizes"]
    decode = [r for r in rows if r.get("batch_size") is not None]
    return min(decode, key=lambda r: r["batch_size"]) if decode else min(rows, key=lambda r: r["bytes"])


def _judge(u: Mapping, c: Mapping) -> tuple[str, float]:
    ratio = c["median_us"] / u["median_us"]
    u_min, u_p90 = u.get("min_us", u["median_us"]), u.get("p90_us", u["median_us"])
    if c.get("p90_us", c["median_us"]) < u_min:
        return "kept", ratio
    if u_min <= c["median_us"] <= u_p90:
        return "same", ratio
    return ("slower" if ratio > 1 else "within noise"), ratio


WHY = {"kept": "faster beyond the floor's noise (its loops wholly below the unit's)",
       "same": "inside the unit's own spread", "slower": "slower than the unit's settings",
       "within noise": "faster, but its spread reaches the unit's: not beyond the floor's noise"}


def screen(plan: Mapping, floors: Mapping[str, object], failed: Mapping[str, str] | None = None, *,
           transfer_ms: float | None = None) -> dict:
    """``{size, unit, screened, load, not_loaded, counts}`` of ``plan`` (:func:`.plan.build_plan`) with
    the floors measured (``{"unit": ..., candidate name: ...}``, each allreduce_bench.py's JSON or its
    path) and the runs that ``failed`` (name -> why)."""
    failed = dict(failed or {})
    pre = [c for c in plan["candidates"] if c["prescreen"]]
    screened, unit_row, size = [], None, None
    if pre:
        if "unit" not in floors:
            raise TuneInputError("the pre-screen has no measurement of the unit's own settings (allreduce-unit.json): "
                                 "its run must pass for the candidates to be judged")
        try:
            unit = load_floor(floors["unit"])
            size = screen_size(unit)
            unit_row = size
            for c in pre:
                if c["name"] in failed or c["name"] not in floors:
                    why = failed.get(c["name"]) or "its run failed (allreduce/allreduce.md says why)"
                    screened.append({"name": c["name"], "state": "failed", "ratio": None, "why": why})
                    continue
                row = next((r for r in load_floor(floors[c["name"]])["sizes"] if r["bytes"] == size["bytes"]), None)
                if row is None:
                    screened.append({"name": c["name"], "state": "failed", "ratio": None,
                                     "why": f"its run did not measure {size['bytes']} bytes"})
                    continue
                state, ratio = _judge(size, row)
                entry = {"name": c["name"], "state": state, "ratio": round(ratio, 4), "median_us": row["median_us"],
                         "p90_us": row.get("p90_us"), "why": f"{WHY[state]}: x{ratio:.2f}"}
                if state == "kept":
                    entry["expected_ms"] = (round((1 - ratio) * transfer_ms, 4) if transfer_ms is not None
                                            else c.get("expected_ms"))
                screened.append(entry)
        except AllreduceInputError as exc:
            raise TuneInputError(f"the pre-screen's measurements: {exc}") from None
    by_name = {s["name"]: s for s in screened}
    eligible = []
    for order, c in enumerate(plan["candidates"]):
        s = by_name.get(c["name"])
        if c["prescreen"] and (s is None or s["state"] != "kept"):
            continue
        expected = s.get("expected_ms") if s else c.get("expected_ms")
        eligible.append((order, {**c, "expected_ms": expected}))
    eligible.sort(key=lambda oc: (-oc[1]["expected_ms"] if isinstance(oc[1]["expected_ms"], (int, float))
                                  and not math.isnan(oc[1]["expected_ms"]) else math.inf, oc[0]))
    limit = plan["budget"]["max_loads"]
    load = [c for _, c in eligible[:limit]]
    not_loaded = [{"name": c["name"], "why": f"the budget of {limit} load(s) (vllm_tune_max_loads) went to candidates "
                                             "expected to recover more, or earlier in the plan"}
                  for _, c in eligible[limit:]]
    counts = {state: sum(1 for s in screened if s["state"] == state)
              for state in ("kept", "same", "slower", "within noise", "failed")}
    return {"size": None if size is None else {"bytes": size["bytes"], "batch_size": size.get("batch_size")},
            "unit": None if unit_row is None else {k: unit_row.get(k) for k in ("median_us", "min_us", "p90_us")},
            "transfer_ms": transfer_ms, "screened": screened, "load": load, "not_loaded": not_loaded,
            "counts": counts}


def screen_words(result: Mapping) -> str:
    """``pre-screened 6 at 14336 B (batch 1): kept 3, 2 slower, 1 same`` or ``nothing pre-screened``."""
    if not result["screened"]:
        return "nothing pre-screened"
    size = result["size"]
    where = f"{size['bytes']} B" + (f" (batch {size['batch_size']})" if size.get("batch_size") is not None else "")
    counts = ", ".join(f"{n} {state}" for state, n in result["counts"].items() if n and state != "kept")
    return (f"pre-screened {len(result['screened'])} on the all-reduce floor at {where}: "
            f"kept {result['counts']['kept']}" + (f", {counts}" if counts else ""))
