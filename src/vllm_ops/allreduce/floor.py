"""The all-reduce floor: what the host's GPUs take for one all-reduce at a given message size,
measured by ``roles/allreduce_bench/files/allreduce_bench.py``, set beside a trace's transfer.

A floor is that script's JSON (``tool: allreduce_bench``, ``schema: 1``): per message size
(``bytes``) the median time per call, replayed from a CUDA graph with NCCL (the collective's own
time, as the kernels of a trace show it). :func:`floor_at` gives the floor at any size: the
measured median where the size was measured, else interpolated between the two nearest
sizes on log-log axes (latency is flat, then linear, in size), never extrapolated.

A floor applies to a collective only when it was measured with NCCL (a gloo run on the CPU
proves the plumbing, not the GPUs' speed), with as many ranks as the collective's group has
(the ring's steps depend on it), and moved data: a world size of 1
does not (NCCL launches no kernel for an in-place all-reduce of one rank), so such a file is
refused as a floor, with the reason.

``floor_ratio`` of a collective group = its median transfer (min over ranks per call, steady
calls) / the floor at its median message size. At or below :data:`AT_FLOOR` the all-reduce runs
at what the hardware does at that size; from :data:`ABOVE_FLOOR` on, settings are worth a sweep.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from .errors import AllreduceInputError

AT_FLOOR = 1.25
ABOVE_FLOOR = 1.5


def load_floor(source: str | Path | Mapping) -> dict:
    """A floor from its JSON file (or the parsed dict), checked. Raises AllreduceInputError."""
    if isinstance(source, Mapping):
        data, where = dict(source), "allreduce floor"
    else:
        where = str(source)
        try:
            data = json.loads(Path(source).read_text(encoding="utf-8"))
        except OSError as exc:
            raise AllreduceInputError(f"{where}: cannot read the all-reduce floor: {exc.strerror or exc}") from None
        except ValueError as exc:
            raise AllreduceInputError(f"{where}: the all-reduce floor is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("tool") != "allreduce_bench" or data.get("schema") != 1:
        raise AllreduceInputError(f"{where}: not an all-reduce floor (expected allreduce_bench's JSON, schema 1)")
    sizes = data.get("sizes")
    if not isinstance(sizes, list) or not sizes:
        raise AllreduceInputError(f"{where}: the all-reduce floor has no sizes")
    for row in sizes:
        if not (isinstance(row, dict) and isinstance(row.get("bytes"), int) and row["bytes"] > 0
                and isinstance(row.get("median_us"), (int, float)) and row["median_us"] > 0):
            raise AllreduceInputError(f"{where}: a floor size lacks a positive bytes or median_us: {row!r}")
    world = data.get("world_size")
    if not isinstance(world, int) or world < 1:
        raise AllreduceInputError(f"{where}: the all-reduce floor has no world_size")
    data["sizes"] = sorted(sizes, key=lambda r: r["bytes"])
    data["source"] = where
    return data


def usable(floor: Mapping, group_size: int | None) -> str | None:
    """Why ``floor`` does not apply to a group of ``group_size`` ranks, or None when it does."""
    if floor.get("backend", "nccl") != "nccl":
        return (f"measured with {floor.get('backend')} on the CPU, not NCCL on the GPUs: it proves the plumbing, "
                "it is no floor for a GPU trace")
    if floor["world_size"] < 2:
        return ("measured with one rank, where NCCL moves no data (an in-place all-reduce of one rank launches "
                "no kernel): a host's cost per call, not a floor")
    if group_size is not None and floor["world_size"] != group_size:
        return f"measured with {floor['world_size']} ranks, the group has {group_size}"
    return None


def floor_at(floor: Mapping, nbytes: float) -> tuple[float | None, str]:
    """(floor in µs, how: ``measured`` or ``interpolated``), or (None, why) outside the sizes measured."""
    sizes = floor["sizes"]
    for row in sizes:
        if row["bytes"] == nbytes:
            return float(row["median_us"]), "measured"
    if nbytes < sizes[0]["bytes"] or nbytes > sizes[-1]["bytes"]:
        return None, (f"{int(nbytes)} bytes is outside the sizes measured "
                      f"({sizes[0]['bytes']}-{sizes[-1]['bytes']})")
    hi = next(i for i, row in enumerate(sizes) if row["bytes"] > nbytes)
    a, b = sizes[hi - 1], sizes[hi]
    t = (math.log(nbytes) - math.log(a["bytes"])) / (math.log(b["bytes"]) - math.log(a["bytes"]))
    return math.exp(math.log(a["median_us"]) + t * (math.log(b["median_us"]) - math.log(a["median_us"]))), \
        "interpolated"


def annotate(groups: list[dict], floor: Mapping | None) -> None:
    """Give each collective group of a summary its floor: ``floor_us``, ``floor_how``,
    ``floor_ratio`` (transfer median / floor) and ``floor_note`` (why there is none)."""
    for g in groups:
        g.update(floor_us=None, floor_how=None, floor_ratio=None, floor_note=None)
        if floor is None:
            g["floor_note"] = "no floor given"
            continue
        why = usable(floor, g.get("size"))
        nbytes = (g.get("message_bytes") or {}).get("median")
        transfer = (g.get("transfer_us") or {}).get("median")
        if why is None and nbytes is None:
            why = "the trace does not record the message size"
        if why is None:
            us, how = floor_at(floor, nbytes)
            if us is None:
                why = how
            else:
                g.update(floor_us=round(us, 3), floor_how=how,
                         floor_ratio=round(transfer / us, 3) if transfer else None)
        g["floor_note"] = why


def to_markdown(floor: Mapping) -> str:
    """The floor as a Markdown table: per size the time per call and the bandwidths."""
    rows = [f"## All-reduce floor: {_ranks(floor.get('world_size'))}, {floor.get('backend')}, "
            f"{floor.get('gpu_name') or 'no GPU'}", "",
            f"NCCL {floor.get('nccl_version') or '-'}, PyTorch {floor.get('torch_version') or '-'}; "
            f"{floor.get('timing') or '-'}; environment: "
            + (", ".join(f"`{k}={v}`" for k, v in sorted((floor.get("environment") or {}).items())) or "none") + ".",
            ""]
    if floor.get("started_at"):
        run = f" (run `{floor['label']}`)" if floor.get("label") else ""
        rows += [f"Measured at {floor['started_at']} as {floor.get('user') or '?'} in "
                 f"{_num(floor.get('seconds'), '.1f')} s{run}.", ""]
    if floor.get("note"):
        rows += [f"**{floor['note']}.**", ""]
    rows += ["| bytes | batch size | median µs | p90 µs | min µs | algbw GB/s | busbw GB/s |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in floor["sizes"]:
        rows.append(f"| {s['bytes']} | {s.get('batch_size') if s.get('batch_size') is not None else '-'} "
                    f"| {_num(s.get('median_us'))} | {_num(s.get('p90_us'))} | {_num(s.get('min_us'))} "
                    f"| {_num(s.get('algbw_gbps'), '.4g')} | {_num(s.get('busbw_gbps'), '.4g')} |")
    return "\n".join(rows) + "\n"


def headline(floors: list[Mapping], failed: Mapping[str, str] | None = None) -> str:
    """One line: the first floor's median at each decode size (else its smallest size), then each
    other floor's ratio to it at the smallest of those sizes, then how many runs failed."""
    base = floors[0]
    rows = [r for r in base["sizes"] if r.get("batch_size") is not None] or base["sizes"][:1]
    parts = [f"batch {r['batch_size']} ({r['bytes']} B) {r['median_us']:.1f} µs" if r.get("batch_size") is not None
             else f"{r['bytes']} B {r['median_us']:.1f} µs" for r in rows]
    line = (f"all-reduce on {_ranks(base.get('world_size'))} ({base.get('backend')}, "
            f"{base.get('gpu_name') or 'no GPU'}): " + ", ".join(parts))
    if base.get("world_size") == 1:
        line += " (one rank: the host's cost per call, not a floor)"
    first = rows[0]
    ratios = []
    for i, other in enumerate(floors[1:], start=1):
        match = next((r for r in other["sizes"] if r["bytes"] == first["bytes"]), None)
        if match is not None:
            ratio, inside = _versus(first, match)
            ratios.append(f"{other.get('label') or f'run {i + 1}'} " + ("same" if inside else f"x{ratio:.2f}"))
    if ratios:
        line += f"; at {first['bytes']} B: " + ", ".join(ratios)
    if failed:
        line += f"; {len(failed)} failed ({', '.join(sorted(failed))})"
    return line


def compare_markdown(floors: list[Mapping], failed: Mapping[str, str] | None = None) -> str:
    """Several floors measured on one host (the unit's environment first, then NCCL variants) side
    by side: per size each one's median and its ratio to the first. A pre-screen, not a verdict:
    the service's own transfer under a variant is what a profile of that variant measures."""
    base = floors[0]
    labels = [f.get("label") or f"run {i + 1}" for i, f in enumerate(floors)]
    rows = [f"## All-reduce by variant: {_ranks(base.get('world_size'))}, {base.get('backend')}, "
            f"{base.get('gpu_name') or 'no GPU'}", ""]
    for label, f in zip(labels, floors, strict=True):
        env = ", ".join(f"`{k}={v}`" for k, v in sorted((f.get("environment") or {}).items())) or "none"
        rows.append(f"- **{label}**: environment {env}")
    for name, why in sorted((failed or {}).items()):
        rows.append(f"- **{name}**: failed: {why}")
    rows += ["", f"Median µs per call; in brackets the ratio to **{labels[0]}** (below 1: faster), \"same\" where "
             f"the median lies inside {labels[0]}'s own spread (its min to p90 over the loops).", "",
             "| bytes | batch size | " + " | ".join(labels) + " |",
             "| ---: | ---: | " + " | ".join("---:" for _ in labels) + " |"]
    by_size = [{r["bytes"]: r for r in f["sizes"]} for f in floors]
    for row in base["sizes"]:
        cells = []
        for i, sizes in enumerate(by_size):
            other = sizes.get(row["bytes"])
            if other is None:
                cells.append("-")
            elif i == 0:
                cells.append(_num(other["median_us"]))
            else:
                ratio, inside = _versus(row, other)
                cells.append(f"{_num(other['median_us'])} ({ratio:.2f}{', same' if inside else ''})")
        batch = row.get("batch_size") if row.get("batch_size") is not None else "-"
        rows.append(f"| {row['bytes']} | {batch} | " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"


def _versus(base: Mapping, other: Mapping) -> tuple[float, bool]:
    """(other's median / base's, whether other's median lies inside base's min-to-p90 spread)."""
    inside = base.get("min_us") is not None and base.get("p90_us") is not None \
        and base["min_us"] <= other["median_us"] <= base["p90_us"]
    return other["median_us"] / base["median_us"], inside


def _num(v, fmt: str = ".3f") -> str:
    return "-" if v is None else format(v, fmt)


def _ranks(n) -> str:
    return f"{n} rank" if n == 1 else f"{n} ranks"
