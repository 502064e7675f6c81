"""One CSV row per tune in ``artifacts/<host>/tunes.csv``: what it tested, what won, what it cost.

The columns are fixed (:data:`COLUMNS`, described in :data:`COLUMN_DOCS`); the file is appended
with the project's CSV appender (:func:`vllm_ops.csvfile.append_csv_rows`). An empty cell is a
figure that was not measured, never a zero.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ..csvfile import append_csv_rows
from ..job import parse_time
from .errors import TuneInputError

COLUMN_DOCS: dict[str, str] = {
    "tune_id": "the tune's id (its start, UTC)",
    "finished_at": "when its report was written, ISO 8601 UTC",
    "host": "the host tuned",
    "profile_path": "how it profiled: live, restart, or none (a plan file)",
    "verdict": "the verdict its plan came from, in words (empty: a plan file)",
    "candidates": "variants the plan proposed",
    "prescreened": "candidates run on the all-reduce floor",
    "kept": "pre-screened candidates that beat the unit's settings beyond the floor's noise",
    "loaded": "variants loaded and benchmarked",
    "failed": "loaded variants that failed to load or serve",
    "winner": "the winner's name (empty: no tested change helps)",
    "changes": "what the winner changes from the unit's settings",
    "tpot_change_pct": "the winner's median TPOT at the lowest concurrency against the baseline, %",
    "tpot_noise_pct": "the noise band of that change, %",
    "expected_ms": "what the plan expected the winner to change TPOT by, ms (negative: faster)",
    "measured_ms": "what it measured, ms",
    "applied": "whether the winner became the normal service (vllm_tune_apply)",
    "model_loads": "model loads the tune cost",
    "downtime_s": "seconds the service did not answer /health 200",
    "wall_s": "seconds from the tune's start to its report",
}
COLUMNS: tuple[str, ...] = tuple(COLUMN_DOCS)


def row(report: Mapping) -> dict:
    """The CSV row of a tune report (:func:`.result.analyze`'s dict)."""
    win = report.get("winner") or {}
    exp = report.get("experiment") or {}
    variants = exp.get("variants") or []
    costs = report["costs"]
    wall = None
    if report.get("started_at") and report.get("finished_at"):
        wall = round((parse_time(report["finished_at"]) - parse_time(report["started_at"])).total_seconds())
    out = {
        "tune_id": report["id"], "finished_at": report.get("finished_at"), "host": report["host"],
        "profile_path": report.get("profile_path") or "none", "verdict": report.get("verdict"),
        "candidates": len((report.get("plan") or {}).get("candidates") or []), "prescreened": costs["prescreened"],
        "kept": costs["kept"], "loaded": len(variants), "failed": sum(1 for v in variants if v["status"] == "failed"),
        "winner": win.get("name"), "changes": win.get("changes"),
        "tpot_change_pct": (win.get("tpot") or {}).get("change_pct"), "tpot_noise_pct": (win.get("tpot") or {}).get(
            "noise_pct"), "expected_ms": win.get("expected_ms"), "measured_ms": win.get("measured_ms"),
        "applied": bool(report.get("applied")), "model_loads": costs["model_loads"], "downtime_s": costs["downtime_s"],
        "wall_s": wall,
    }
    assert tuple(out) == COLUMNS
    return out


def append_tune(path: str | os.PathLike, report: Mapping) -> None:
    """Append the tune's row to the CSV at ``path``; a file with another header is refused."""
    append_csv_rows(path, [row(report)], COLUMNS, what="tunes CSV", error=TuneInputError)
