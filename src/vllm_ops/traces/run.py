"""One run, typed: the ranks read (:mod:`.ranks`), in rank order, each with the step set chosen
(:mod:`.findings`) and its decode steps, and the steady state chosen over them (:mod:`.steady`). Every
analyzer of the summary reads a :class:`Run`; :func:`build` makes one and the notes of what reading
and choosing found (ranks numbered by order, the steps used instead of decode steps, what a rank's
trace lacks)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from . import findings, steady
from .annotations import DECODE, MIXED, PREFILL
from .errors import TraceInputError
from .notes import Note, note
from .options import Resolved
from .ranks import Loaded
from .reader import rank_from_filename
from .steps import measured

__all__ = ["DEFAULT_DECODE_PATTERN", "DEFAULT_PREFILL_PATTERN", "FALLBACK_DECODE_PATTERN", "Run", "build"]

# The decode steps the default finds (vLLM's native and detailed names, SGLang's), as one regex, for
# the record and the help text; the families in .annotations decide.
DEFAULT_DECODE_PATTERN = (r"^execute_(?:\d+_)?context_0\((?:[\d_]*|sq0sk0sqsq0sqsk0)\)"
                          r"_generation_[1-9]\d*\((?:[\d_]*|sq\d+sk\d+sqsq\d+sqsk\d+)\)$|^step\[DECODE bs=[1-9]")
FALLBACK_DECODE_PATTERN = r"^ProfilerStep#\d+$"
DEFAULT_PREFILL_PATTERN = (r"^execute_(?:\d+_)?context_[1-9]\d*\((?:[\d_]*|sq\d+sk\d+sqsq\d+sqsk\d+)\)"
                           r"_generation_0\((?:[\d_]*|sq0sk0sqsq0sqsk0)\)$|^step\[EXTEND bs=[1-9]")
_NO_SET = {"steps_from": None, "steps": [], "calls": None, "top": {}, "overlapping_spans": 0, "pairing": None,
           "repeated_ids": 0, "nested_spans": 0}


@dataclass(frozen=True)
class Run:
    """One run's ranks and the choices every analyzer shares.

    ``ranks``: the reader's rank dicts (:func:`.ranks.summarize_rank`), in rank order, each with ``set``
    (the step set chosen) and ``decode`` (its decode steps). ``decode_used``: the pattern the decode
    steps were found by. ``engine``, ``api``: :mod:`.findings`'. ``withheld``: why no engine advice is
    given (a trace that is no inference engine's), or None. ``measured``: the ranks with GPU kernels and
    decode steps. ``lockstep``: they have as many decode steps each, so the steady state is chosen across
    them (``left``: step -> why left out, the same on every rank), else rank by rank (``left_by_rank``).
    ``steady``: the steady decode steps, one set in lockstep, else per rank."""

    resolved: Resolved
    loaded: Loaded
    ranks: list[dict]
    world: int | None
    decode_used: str
    choice: dict
    engine: str | None
    api: str | None
    withheld: str | None
    measured: list[dict]
    lockstep: bool
    left: dict
    left_by_rank: dict
    steady: object

    @property
    def options(self):
        return self.resolved.options

    @property
    def unmeasured(self) -> list[int]:
        """The ranks whose traces hold no GPU kernel events."""
        return [r["rank"] for r in self.ranks if not measured(r)]

    def decode_steps(self) -> dict[int, set[int]]:
        """Each measured rank's decode step indices."""
        return {r["rank"]: {s["index"] for s in r["decode"]} for r in self.measured}


def build(loaded: Loaded, resolved: Resolved) -> tuple[Run, list[Note]]:
    """The run of the ranks read: ranks numbered, the step set chosen, the steady state chosen; and the
    notes of what that found, in the order found."""
    notes: list[Note] = []
    ranks = loaded.ranks
    notes += _assign_ranks(ranks)
    ranks.sort(key=lambda r: r["rank"])
    options = resolved.options
    choice = findings.choose_steps(ranks, options.decode_pattern)
    decode_used = FALLBACK_DECODE_PATTERN if choice["fallback"] else (options.decode_pattern or DEFAULT_DECODE_PATTERN)
    engine, api = findings.engine(ranks), findings.api(ranks)
    withheld = None
    if choice["fallback"]:
        withheld = None if engine is not None else findings.NOT_AN_ENGINE
        notes.append(note("profiler_steps", "front", withheld=withheld))
    elif choice["phase_names"]:
        suggested = findings.suggest_pattern(ranks)
        notes.append(note("phases_named", "front", phase_names=choice["phase_names"], command=findings.command(
            loaded.paths, "--decode-pattern", shlex.quote(suggested)) if suggested else None))
    for r in ranks:
        r["set"] = r["sets"].get(choice["key"]) or dict(_NO_SET)
        r["decode"] = [s for s in r["set"]["steps"] if s["phase"] == DECODE]
        notes += _lacks(r, api)
    live = [r for r in ranks if measured(r) and r["decode"]]
    # steady state, rule 3 across ranks with equal step counts
    lockstep = bool(live) and len({len(r["decode"]) for r in live}) == 1
    if lockstep:
        left = steady.group_left_out({r["rank"]: r["decode"] for r in live})
        left_by_rank = {r["rank"]: left for r in ranks}
        chosen: object = {s["index"] for s in live[0]["decode"] if s["index"] not in left}
    else:
        left = {}
        left_by_rank = {r["rank"]: {i: "; ".join(w) for i, w in steady.left_out(r["decode"]).items()} for r in live}
        chosen = {r["rank"]: {s["index"] for s in r["decode"] if s["index"] not in left_by_rank.get(r["rank"], {})}
                  for r in live}
    world = max((r["world_size"] for r in ranks if r["world_size"]), default=None)
    return Run(resolved, loaded, ranks, world, decode_used, choice, engine, api, withheld, live, lockstep, left,
               left_by_rank, chosen), notes


def _assign_ranks(ranks: list[dict]) -> list[Note]:
    """A rank for every file: its distributedInfo's, else its name's, else the lowest free one (a note)."""
    for r in ranks:
        if r["rank"] is None:
            guess = rank_from_filename(r["file"])
            if guess is not None:
                r["rank"], r["rank_from"] = guess, "file name"
    seen: dict[int, str] = {}
    for r in ranks:
        if r["rank"] is not None:
            if r["rank"] in seen:
                raise TraceInputError(f"{r['file']}: rank {r['rank']} is also claimed by {seen[r['rank']]}; "
                                      "give one file per rank")
            seen[r["rank"]] = r["file"]
    notes = []
    for r in ranks:
        if r["rank"] is None:
            free = 0
            while free in seen:
                free += 1
            r["rank"], r["rank_from"] = free, "order"
            seen[free] = r["file"]
            notes.append(note("rank_by_order", file=r["file"], rank=free))
    return notes


def _lacks(r: dict, api: str | None) -> list[Note]:
    """What a rank's trace lacks: GPU kernels, the kernels its graphs replayed, events' fields, the
    launches of its GPU activities."""
    where = {"rank": r["rank"], "file": r["file"]}
    notes = []
    if not measured(r):
        cpu_steps = len(r["decode"]) if r["set"]["steps_from"] == "user_annotation" else 0
        notes.append(note("not_measured", **where, cpu_steps=cpu_steps, activities=r["activities"]))
    if r["graph_launches_without_activity"]:
        notes.append(note("graphs_missing", **where, missing=r["graph_launches_without_activity"],
                          launches=r["graph_launches"], api=api))
    if r["bad_events"]:
        notes.append(note("bad_events", **where, n=r["bad_events"]))
    if r["set"]["steps_from"] == "user_annotation" and measured(r) and r["activities_without_launch"]:
        notes.append(note("unattributed", **where, n=r["activities_without_launch"], activities=r["activities"]))
    return notes


def step_notes(run: Run) -> list[Note]:
    """What the step spans say beside the steps: a rank with no decode step (front: what was found
    instead, the names seen), decode steps without GPU activity, nested or overlapping spans, ranks
    with different step counts."""
    notes = []
    for r in run.ranks:
        where = {"rank": r["rank"], "file": r["file"]}
        steps = r["decode"]
        if not steps:
            other = [s for s in r["set"]["steps"] if s["phase"] in (PREFILL, MIXED)]
            mixed = [s for s in other if s["phase"] == MIXED]
            suggested = findings.suggest_pattern([r])
            notes.append(note("no_decode_steps", "front", **where, pattern=run.decode_used,
                              prefill=len(other) - len(mixed), mixed=len(mixed),
                              mixed_requests=sum(s["generation_requests"] or 0 for s in mixed),
                              suggested=suggested if suggested != run.decode_used else None,
                              gpu_names=r["gpu_annotation_names"], cpu_names=r["cpu_annotation_names"]))
        elif measured(r) and not any(s["activities"] for s in steps):
            notes.append(note("no_activity_in_steps", **where, steps=len(steps)))
        if r["set"].get("nested_spans"):
            notes.append(note("nested_spans", **where, n=r["set"]["nested_spans"]))
        if r["set"]["overlapping_spans"]:
            notes.append(note("overlapping_spans", **where, n=r["set"]["overlapping_spans"]))
    counts = {r["rank"]: len(r["decode"]) for r in run.ranks}
    if len(set(counts.values())) > 1:
        notes.append(note("step_counts_differ", counts=counts))
    return notes


def unmeasured_notes(run: Run) -> list[Note]:
    """Ranks without GPU kernels beside ranks with them: the group-wide figures cover the others."""
    unmeasured = run.unmeasured
    if not unmeasured or len(unmeasured) == len(run.ranks):
        return []
    return [note("ranks_unmeasured", unmeasured=unmeasured, ranks=len(run.ranks),
                 measured=sorted(r["rank"] for r in run.ranks if measured(r)))]
