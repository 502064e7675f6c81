"""Are the figures possible: what no single capture of one rank can show is refused, not printed.

Checks (thresholds are the constants below):

* **Negative durations**: GPU activities and step annotations with ``dur < 0``; the reader
  drops them (``negative_durations``) and the summary says how many.
* **Repeated External ids** among a rank's step annotations: the trace looks concatenated from
  several captures (each capture numbers its ids from 1), so pairing a GPU step span with its
  CPU twin by External id would pair steps of different captures. The twins are then paired by
  order where that holds (:func:`.timeline.pair_cpu_spans`), else not at all; the summary says
  which.
* **Impossible steps**: a negative period or window, GPU busy time above the step's window, or
  GPU busy time above the step's period (each beyond :data:`SLACK_MS`). A rank with such steps
  makes the verdict inconclusive (``impossible``), naming the first of them; its figures stay in
  the JSON for inspection.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .notes import Note, note

if TYPE_CHECKING:
    from .run import Run

SLACK_MS = 0.001


def impossible_steps(steps: Sequence[Mapping]) -> list[tuple[int, str]]:
    """``[(step index, what is impossible)]`` over one rank's step rows."""
    out = []
    for s in steps:
        period, window, busy = s.get("period_ms"), s.get("window_ms"), s.get("busy_ms")
        if period is not None and period < -SLACK_MS:
            out.append((s["index"], f"period {period:.3f} ms"))
        elif window is not None and window < -SLACK_MS:
            out.append((s["index"], f"window {window:.3f} ms"))
        elif busy is not None and window is not None and busy > window + SLACK_MS:
            out.append((s["index"], f"GPU busy {busy:.3f} ms in a window of {window:.3f} ms"))
        elif busy is not None and period is not None and busy > period + SLACK_MS:
            out.append((s["index"], f"GPU busy {busy:.3f} ms in a period of {period:.3f} ms"))
    return out


def analyze(run: Run) -> tuple[dict, list[Note]]:
    """:func:`check` over the run's ranks, and its notes: each rank's dropped and repeated ids, and why
    the verdict is refused."""
    checks = check(run.ranks)
    notes = []
    for r in run.ranks:
        key, where = str(r["rank"]), {"rank": r["rank"], "file": r["file"]}
        if key in checks["negative_durations"]:
            notes.append(note("negative_durations", **where, n=checks["negative_durations"][key]))
        if key in checks["repeated_ids"]:
            captures = max((s.get("capture", 0) for s in r["set"]["steps"]), default=0) + 1
            notes.append(note("repeated_ids", **where, n=checks["repeated_ids"][key], captures=captures,
                              pairing=checks["pairing"].get(key), steps_from=r["set"]["steps_from"]))
    if checks["refused"]:
        notes.append(note("refused", reason=checks["refused"]))
    return checks, notes


def check(ranks: Sequence[Mapping]) -> dict:
    """``{negative_durations: {rank: n}, repeated_ids: {rank: n}, pairing: {rank: how},
    impossible: {rank: [[index, what], ...]}, refused: str | None}`` over the reader's rank dicts
    (with their chosen step set); ``refused`` is the reason the verdict cannot be given."""
    out: dict = {"negative_durations": {}, "repeated_ids": {}, "pairing": {}, "impossible": {}, "refused": None}
    for r in ranks:
        key = str(r["rank"])
        if r.get("negative_durations"):
            out["negative_durations"][key] = r["negative_durations"]
        st = r["set"]
        if st.get("repeated_ids"):
            out["repeated_ids"][key] = st["repeated_ids"]
        out["pairing"][key] = st.get("pairing")
        bad = impossible_steps(st["steps"]) if r["gpu_kernels"] else []
        if bad:
            out["impossible"][key] = [list(b) for b in bad]
    if out["impossible"]:
        rank, bad = next(iter(out["impossible"].items()))
        n = sum(len(v) for v in out["impossible"].values())
        out["refused"] = (f"impossible figures: {n} steps no single capture can show (rank {rank} step {bad[0][0]}: "
                          f"{bad[0][1]}); the trace may be concatenated from several captures or damaged")
    return out
