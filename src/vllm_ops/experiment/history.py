"""One CSV row per variant (the baseline too) and concurrency in ``artifacts/<host>/experiments.csv``.

The columns are fixed (:data:`COLUMNS`, described in :data:`COLUMN_DOCS`); the file is appended
with the project's CSV appender (:func:`vllm_ops.csvfile.append_csv_rows`): one lock,
header on a new file, a file without the columns added since (:data:`ADDED_COLUMNS`) migrated, and a
file whose header differs otherwise is never appended to. An empty cell is a
figure that was not measured, never a zero.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from pathlib import Path

from ..csvfile import append_csv_rows
from .analysis import THROUGHPUT, TPOT
from .errors import ExperimentInputError
from .inputs import METRICS

COLUMN_DOCS: dict[str, str] = {
    "experiment_id": "the experiment's id",
    "finished_at": "when the host's experiment finished, ISO 8601 UTC",
    "host": "the host that measured the row",
    "variant": "the variant's name ('baseline': the normal service, both rounds pooled)",
    "settings": "the variant's environment and extra arguments in words (the baseline: the base settings)",
    "status": "ok, failed (the variant failed, or no request completed at this point), not run (the experiment "
              "stopped before the variant) or not measured (no run at this point)",
    "category": "the variant's category (better, worse, trade-off, no change, not compared, failed, not run; "
                "baseline)",
    "concurrency": "requests in flight at once (vllm bench serve --max-concurrency)",
    "runs": "benchmark runs at this point (repeats; both rounds for the baseline)",
    **{m: f"{m} median over the runs" for m in METRICS},
    "completed": "requests completed, sum over the runs",
    "failed_requests": "requests failed, sum over the runs",
    "tpot_change_pct": "median TPOT against the host's baseline, % (empty: baseline row or not compared)",
    "tpot_noise_pct": "the noise band of that change, %",
    "tpot_verdict": "better, worse, no change, failed or not compared",
    "throughput_change_pct": "output throughput against the host's baseline, %",
    "throughput_noise_pct": "the noise band of that change, %",
    "throughput_verdict": "better, worse, no change, failed or not compared",
    "spec_acceptance": "accepted / draft tokens of speculative decoding (empty: no drafts)",
    "preemptions": "scheduler preemptions, sum over the runs (empty: the metric is absent)",
    "baseline_host": "the host whose baseline the row is compared with",
    "load_ready_s": "the server's model load, seconds from its start to ready (the baseline: the normal service "
                    "loaded back at the end; empty: not loaded by the experiment, or it never got ready)",
    "load": "what the benchmark sent: 'random', 'prompts FILE', or 'replay RECORDING' (at 'xN' its speed; the "
            "row's concurrency is then 0, the recording's own arrivals)",
}
COLUMNS: tuple[str, ...] = tuple(COLUMN_DOCS)
# Columns added since the first release, at the end: a file without them is migrated, its rows padded.
ADDED_COLUMNS: tuple[str, ...] = ("load_ready_s", "load")


def load_words(load: Mapping) -> str:
    """The ``load`` column: what the benchmark sent, in a word and a path."""
    if load.get("traffic"):
        speed = float(load.get("traffic_speed") or 1)
        return f"replay {load['traffic']}" + (f" x{speed:g}" if speed != 1 else "")
    return f"prompts {load['prompts_file']}" if load.get("prompts_file") else "random"


def rows(report: Mapping) -> list[dict]:
    """The CSV rows of a report (``report.json``'s dict): baselines first, then the variants."""
    finished = {e["host"]: e["finished_at"] for e in report["experiments"]}
    sent = load_words(report["load"])
    out = []
    for entry in [*report["baselines"], *report["variants"]]:
        for p in entry["points"]:
            cmp = p.get("comparison") or {}
            tpot, thr = cmp.get(TPOT) or {}, cmp.get(THROUGHPUT) or {}
            status = entry["status"] if entry["status"] != "ok" else p["status"]
            load = entry.get("load")
            row = {
                "experiment_id": report["id"], "finished_at": finished.get(entry["host"]), "host": entry["host"],
                "variant": entry["name"], "settings": entry["settings"], "status": status,
                "category": entry["category"], "concurrency": p["concurrency"], "runs": p["runs"],
                **{m: p["metrics"][m]["center"] for m in METRICS},
                "completed": p["completed"], "failed_requests": p["failed_requests"],
                "tpot_change_pct": tpot.get("change_pct"), "tpot_noise_pct": tpot.get("noise_pct"),
                "tpot_verdict": tpot.get("verdict"),
                "throughput_change_pct": thr.get("change_pct"), "throughput_noise_pct": thr.get("noise_pct"),
                "throughput_verdict": thr.get("verdict"),
                "spec_acceptance": p["spec_decode"]["acceptance"], "preemptions": p["preemptions"],
                "baseline_host": entry["host"],
                "load_ready_s": load["total_s"] if load and load.get("ready") else None,
                "load": sent,
            }
            assert tuple(row) == COLUMNS
            out.append(row)
    return out


def append_experiment(path: str | os.PathLike, report: Mapping) -> int:
    """Append the report's rows to the CSV at ``path``; returns how many. Refuses (nothing
    written) a file whose header is not :data:`COLUMNS`."""
    got = rows(report)
    append_csv_rows(path, got, COLUMNS, added_columns=ADDED_COLUMNS, what="experiments CSV",
                    error=ExperimentInputError)
    return len(got)


def _kind(load: str) -> str:
    """``replay`` or ``other`` (random tokens or a prompts file): the two sides of :func:`beside`."""
    return "replay" if load.startswith("replay ") else "other"


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "") else None
    except ValueError:
        return None


def beside(path: str | os.PathLike, report: Mapping) -> list[dict]:
    """Each speculating variant of ``report`` (drafts at its headline TPOT point) beside the same host's and
    settings' latest earlier row of the other kind of load in the CSV at ``path`` (read before this report's
    rows are appended): a replay's beside random tokens or a prompts file, and the other way round.
    ``[{name, host, settings, here: {load, concurrency, acceptance, tpot_change_pct, tpot_verdict},
    there: the same from the row, with experiment_id and finished_at, or None}]``."""
    earlier = []
    if Path(path).is_file():
        with open(path, newline="", encoding="utf-8") as fh:
            earlier = [r for r in csv.DictReader(fh) if r.get("experiment_id") != report["id"]]
    here_load = load_words(report["load"])
    out = []
    for v in report["variants"]:
        c = v["headline"]["tpot"]["concurrency"]
        point = next((p for p in v["points"] if p["concurrency"] == c), None)
        if point is None or not point["spec_decode"]["drafts"]:
            continue
        tpot = v["headline"]["tpot"]
        rows = [r for r in earlier if r.get("host") == v["host"] and r.get("settings") == v["settings"]
                and r.get("status") == "ok" and _kind(r.get("load") or "random") != _kind(here_load)]
        # the other load's headline TPOT point: its lowest concurrency (a replay's only point, 0)
        latest = max(rows, key=lambda r: (r.get("finished_at") or "", -int(r.get("concurrency") or 0)), default=None)
        there = None if latest is None else {
            "load": latest.get("load") or "random", "experiment_id": latest["experiment_id"],
            "finished_at": latest.get("finished_at"), "concurrency": int(latest["concurrency"]),
            "acceptance": _number(latest.get("spec_acceptance")),
            "tpot_change_pct": _number(latest.get("tpot_change_pct")), "tpot_verdict": latest.get("tpot_verdict")}
        out.append({"name": v["name"], "host": v["host"], "settings": v["settings"],
                    "here": {"load": here_load, "concurrency": c, "acceptance": point["spec_decode"]["acceptance"],
                             "tpot_change_pct": tpot["change_pct"], "tpot_verdict": tpot["verdict"]},
                    "there": there})
    return out
