"""What users sent, read back from the traffic recorder's files: the mix, the replay's file, and whether a
replay reproduced it.

The recorder (:mod:`vllm_ops_host.traffic`, ``docs/traffic.md``) writes on each host one Mooncake-style
JSONL file a window, each with a sidecar. Definitions:

- **a recording** (:func:`read`): every line of the given files, each with its arrival in Unix seconds (the
  sidecar's ``start`` plus the line's ``timestamp``), sorted by arrival; the sidecars' ``block`` must agree
  (a replay synthesises one prompt block per id of that many tokens). :func:`select` keeps a window of it.
  The window being written is read as far as it is whole: a last line without its newline that is not a
  recorder's line (the recorder was writing it when the file was copied) is left out and counted
  (``partial``); a bad line anywhere else is an error.
- **replayable**: a request answered 200 with a prompt and a completion of at least one token; the rest
  (refused, failed, cut) is counted, not replayed.
- **the replay's file** (:func:`replay_lines`, :func:`replay`, :func:`write_replay`): the replayable requests
  as Mooncake JSONL (``timestamp`` in ms from the first arrival, ``input_length``, ``output_length``, ``hash_ids``), in
  arrival order; ids renumbered in order of first appearance over (epoch, id), since ids of two recorder
  processes (epochs) mean nothing to each other. Its expectation (:class:`Expected`): requests, input and
  output tokens, the span from first to last arrival, the block, and the lengths.
- **the mix** (:func:`mix`): requests, the span and rate, burstiness (the coefficient of variation of the
  gaps between arrivals: 1 for a Poisson stream, above it bursts), the prompt and completion lengths
  (percentiles and power-of-two histograms), and prefix sharing: the share of prompt blocks that repeat a
  block seen before (what a prefix cache large enough could serve) and the share of requests whose first
  block another request had.
- **fidelity** (:func:`fidelity`): what the server saw during a replay (its ``/metrics`` counters and
  histograms before and after, the benchmark's duration) against the expectation. Valid when every request
  completed, the input and output tokens are within :data:`TOKENS_TOLERANCE` of the recording's, the
  replay took no less than :data:`SPAN_FLOOR` of the recording's span (its timing honoured), and the
  prompt and completion lengths' distributions over the server's histogram buckets differ by at most
  :data:`DISTRIBUTION_TOLERANCE` (the largest gap between the two cumulative fractions). Input tokens
  as short as vLLM's default chunk size (16 tokens an id: each prompt at most 16 x its ids) makes it is said
  as that trap: the replay's
  ``--timed-trace-chunk-hash-size`` was not the recording's block.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from vllm_ops.errors import VllmOpsError
from vllm_ops_host import traffic as host

# vLLM's default --timed-trace-chunk-hash-size (0.31.0 and 0.32.0): a replay that does not pass the
# recording's block makes each prompt this many tokens a block.
DEFAULT_CHUNK = 16
TOKENS_TOLERANCE = 0.01
SPAN_FLOOR = 0.9
DISTRIBUTION_TOLERANCE = 0.05
PERCENTILES = (50, 90, 99)


class TrafficInputError(VllmOpsError):
    """A recording that cannot be read or replayed: the message names the file and what to do."""


@dataclass(frozen=True)
class Request:
    arrival: float
    input_length: int | None
    output_length: int | None
    hash_ids: tuple[int, ...]
    epoch: str
    status: int | None
    endpoint: str = "completions"
    stream: bool = False

    @property
    def replayable(self) -> bool:
        return self.status == 200 and bool(self.input_length) and bool(self.output_length)


@dataclass
class Recording:
    requests: list[Request]
    block: int
    sidecars: list[dict] = field(default_factory=list)
    partial: int = 0  # last lines left out: cut where the recorder was writing them (see the module's docstring)

    @property
    def versions(self) -> list[str]:
        return sorted({str(s.get("vllm_version")) for s in self.sidecars if s.get("vllm_version")})


def _files(paths: Iterable[Path | str]) -> list[Path]:
    out: list[Path] = []
    for path in map(Path, paths):
        if not path.exists():
            raise TrafficInputError(f"{path} does not exist: give recordings (traffic-*.jsonl) or their directory")
        out += sorted(path.glob("traffic-*.jsonl")) if path.is_dir() else [path]
    return out


def read(paths: Iterable[Path | str]) -> Recording:
    """Every line of the recordings at ``paths`` (files, or directories of them), sorted by arrival."""
    files = _files(paths)
    if not files:
        raise TrafficInputError("no recording (traffic-*.jsonl) found: fetch one with playbooks/traffic.yml")
    requests: list[Request] = []
    sidecars: list[dict] = []
    partial = 0
    for path in files:
        sidecar_path = path.with_suffix(".json")
        try:
            sidecar = json.loads(sidecar_path.read_text())
        except (OSError, ValueError) as exc:
            raise TrafficInputError(f"{sidecar_path}: the recording's sidecar cannot be read ({exc}); "
                                    "fetch the recording again, each .jsonl with its .json") from exc
        if sidecar.get("schema") != host.SCHEMA:
            raise TrafficInputError(f"{sidecar_path}: schema {sidecar.get('schema')!r}, not {host.SCHEMA!r}")
        sidecars.append(sidecar)
        start, epoch = float(sidecar["start"]), str(sidecar.get("epoch", path.name))
        # the lines the recorder ended, and what follows the last newline: a line it may still be writing
        whole, _, tail = path.read_bytes().decode().rpartition("\n")
        texts = whole.splitlines()
        for number, text in enumerate([*texts, tail], 1):
            if not text.strip():
                continue
            try:
                line = json.loads(text)
                requests.append(Request(
                    arrival=start + float(line["timestamp"]) / 1000, input_length=line.get("input_length"),
                    output_length=line.get("output_length"), hash_ids=tuple(line.get("hash_ids") or ()),
                    epoch=epoch, status=line.get("status"), endpoint=line.get("endpoint", "completions"),
                    stream=bool(line.get("stream", False))))
            except (ValueError, KeyError, TypeError) as exc:
                if number > len(texts):  # the unfinished last line: whole at the next fetch
                    partial += 1
                    continue
                raise TrafficInputError(f"{path}:{number}: not a recorder's line ({exc})") from exc
    blocks = sorted({int(s["block"]) for s in sidecars})
    if len(blocks) != 1:
        raise TrafficInputError(f"the recordings have blocks of {blocks} tokens: replay each block's apart")
    requests.sort(key=lambda r: r.arrival)
    return Recording(requests, blocks[0], sidecars, partial)


def select(recording: Recording, start: float | None = None, end: float | None = None) -> Recording:
    """The requests that arrived in [start, end) (Unix seconds; None: unbounded)."""
    kept = [r for r in recording.requests
            if (start is None or r.arrival >= start) and (end is None or r.arrival < end)]
    return Recording(kept, recording.block, recording.sidecars, recording.partial)


def replay_lines(requests: Iterable[Request]) -> list[dict]:
    """The replayable requests as Mooncake JSONL records (see the module's docstring)."""
    kept = sorted((r for r in requests if r.replayable), key=lambda r: r.arrival)
    ids: dict[tuple[str, int], int] = {}
    first = kept[0].arrival if kept else 0.0
    return [{"timestamp": round((r.arrival - first) * 1000),
             "input_length": int(r.input_length or 0), "output_length": int(r.output_length or 0),
             "hash_ids": [ids.setdefault((r.epoch, i), len(ids)) for i in r.hash_ids]}
            for r in kept]


@dataclass(frozen=True)
class Expected:
    """What a replay of a recording must reproduce."""

    path: str | None
    sha256: str
    block: int
    requests: int
    input_tokens: int
    output_tokens: int
    span_s: float
    input_lengths: tuple[int, ...]
    output_lengths: tuple[int, ...]
    # each request's hash ids (its blocks), in the replay's order
    id_counts: tuple[int, ...]
    left_out: int

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping) -> Expected:
        """The expectation :meth:`to_json` wrote (a replay's ``replay.json``)."""
        try:
            values = {name: data[name] for name in cls.__dataclass_fields__}
        except (KeyError, TypeError) as exc:
            raise TrafficInputError(f"a replay's expectation lacks {exc}: write it again with "
                                    "vllm-experiment-report replay") from None
        for name in ("input_lengths", "output_lengths", "id_counts"):
            values[name] = tuple(values[name])
        return cls(**values)


def replay(recording: Recording, path: Path | str | None = None) -> tuple[str, Expected]:
    """The replay's file as text and what a replay of it must reproduce, the file to lie at ``path``
    (None: only checked, nowhere)."""
    lines = replay_lines(recording.requests)
    if not lines:
        raise TrafficInputError("nothing to replay: no request of the recording was answered 200 with tokens")
    text = "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines)
    inputs, outputs = tuple(x["input_length"] for x in lines), tuple(x["output_length"] for x in lines)
    return text, Expected(path=None if path is None else str(path), sha256=hashlib.sha256(text.encode()).hexdigest(),
                          block=recording.block, requests=len(lines), input_tokens=sum(inputs),
                          output_tokens=sum(outputs), span_s=lines[-1]["timestamp"] / 1000, input_lengths=inputs,
                          output_lengths=outputs, id_counts=tuple(len(x["hash_ids"]) for x in lines),
                          left_out=len(recording.requests) - len(lines))


def write_replay(recording: Recording, path: Path | str) -> Expected:
    """Write the replay's file at ``path`` and return what a replay of it must reproduce."""
    text, expected = replay(recording, path)
    Path(path).write_text(text)
    return expected


def _percentiles(values: list[int]) -> dict[str, float | None]:
    if not values:
        return {f"p{p}": None for p in PERCENTILES} | {"max": None}
    ordered = sorted(values)
    # nearest rank: the smallest value with at least p% of the values at or below it
    out = {f"p{p}": float(ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]) for p in PERCENTILES}
    return out | {"max": float(ordered[-1])}


def _histogram(values: list[int]) -> list[dict]:
    """Counts in power-of-two buckets: ``{le, count}`` for 1, 2, 4, ... up to the largest value's."""
    if not values:
        return []
    top = max(1, max(values))
    bounds = [2 ** k for k in range(math.ceil(math.log2(top)) + 1)]
    counts = [0] * len(bounds)
    for value in values:
        counts[next(i for i, b in enumerate(bounds) if value <= b)] += 1
    return [{"le": b, "count": c} for b, c in zip(bounds, counts, strict=True)]


def mix(requests: Iterable[Request], block: int) -> dict:
    """The mix of ``requests`` (see the module's docstring), every figure of the replayable ones."""
    requests = list(requests)
    kept = sorted((r for r in requests if r.replayable), key=lambda r: r.arrival)
    inputs = [int(r.input_length or 0) for r in kept]
    outputs = [int(r.output_length or 0) for r in kept]
    gaps = [b.arrival - a.arrival for a, b in itertools.pairwise(kept)]
    span = kept[-1].arrival - kept[0].arrival if kept else 0.0
    mean_gap = statistics.fmean(gaps) if gaps else 0.0
    seen: set[tuple[str, int]] = set()
    repeated = total_blocks = 0
    firsts: dict[tuple[str, int], int] = {}
    for r in kept:
        for i in r.hash_ids:
            key = (r.epoch, i)
            total_blocks += 1
            repeated += key in seen
            seen.add(key)
        if r.hash_ids:
            firsts[(r.epoch, r.hash_ids[0])] = firsts.get((r.epoch, r.hash_ids[0]), 0) + 1
    shared_first = sum(n for n in firsts.values() if n > 1)
    per_minute: dict[int, int] = {}
    for r in kept:
        minute = int((r.arrival - kept[0].arrival) // 60)
        per_minute[minute] = per_minute.get(minute, 0) + 1
    return {
        "requests": len(kept), "left_out": len(requests) - len(kept),
        "span_s": span, "rate_per_s": (len(kept) - 1) / span if span > 0 else None,
        "burstiness": statistics.pstdev(gaps) / mean_gap if len(gaps) > 1 and mean_gap > 0 else None,
        "per_minute": [per_minute.get(m, 0) for m in range(max(per_minute) + 1)] if per_minute else [],
        "input": {"tokens": sum(inputs), **_percentiles(inputs), "histogram": _histogram(inputs)},
        "output": {"tokens": sum(outputs), **_percentiles(outputs), "histogram": _histogram(outputs)},
        "prefix": {"block": block, "blocks": total_blocks,
                   "repeated_share": repeated / total_blocks if total_blocks else None,
                   "shared_first_share": shared_first / len(kept) if kept else None},
    }


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    expected: float | None
    got: float | None
    why: str


@dataclass(frozen=True)
class Fidelity:
    valid: bool
    checks: tuple[Check, ...]

    @property
    def message(self) -> str:
        failed = [c.why for c in self.checks if not c.ok]
        return "the replay reproduced the recording" if self.valid else "; ".join(failed)

    def to_json(self) -> dict:
        return {"valid": self.valid, "message": self.message, "checks": [asdict(c) for c in self.checks]}


def _cumulative(values: Iterable[int], bounds: list[float]) -> list[float]:
    values = list(values)
    return [sum(1 for v in values if v <= b) / len(values) for b in bounds] if values else []


def _histogram_cumulative(buckets: Mapping[float, float]) -> tuple[list[float], list[float]]:
    """Bucket bounds (finite) and the cumulative fractions of a Prometheus histogram's ``le`` counts."""
    finite = sorted(b for b in buckets if math.isfinite(b))
    total = buckets.get(math.inf, max(buckets.values(), default=0))
    return finite, [buckets[b] / total if total else 0.0 for b in finite]


def fidelity(expected: Expected, served: Mapping, speed: float = 1.0) -> Fidelity:
    """Whether a replay reproduced ``expected``. ``served``: what the server counted during the replay
    (differences of its ``/metrics`` before and after): ``requests`` (vllm:request_success_total),
    ``failed`` (the benchmark's failed requests), ``input_tokens`` (vllm:prompt_tokens_total),
    ``output_tokens`` (vllm:generation_tokens_total), ``duration_s`` (the benchmark's), and where the
    server exports them ``prompt_buckets`` and ``generation_buckets`` ({le: cumulative count} of
    vllm:request_prompt_tokens and vllm:request_generation_tokens). ``speed``: how much faster than recorded
    the replay sent (its span is the recording's over it)."""
    checks: list[Check] = []
    requests, failed = served.get("requests"), served.get("failed") or 0
    if requests is None:
        checks.append(Check("requests", False, expected.requests, None,
                            "the server's /metrics did not answer before and after the replay, so what it saw "
                            "cannot be checked against the recording"))
    else:
        checks.append(Check("requests", requests == expected.requests and not failed, expected.requests, requests,
                            f"the server completed {requests:.0f} of the recording's {expected.requests} requests"
                            + (f" ({failed} failed)" if failed else "")))
    for name, want in (("input_tokens", expected.input_tokens), ("output_tokens", expected.output_tokens)):
        got = served.get(name)
        ok = got is not None and abs(got - want) <= TOKENS_TOLERANCE * want
        why = f"the server saw {got} {name.replace('_', ' ')} against the recording's {want}"
        if name == "input_tokens" and got and not ok and expected.block != DEFAULT_CHUNK:
            # vLLM's replay makes each id a chunk of that many tokens, the last one cut to the length
            trapped = sum(min(length, DEFAULT_CHUNK * ids)
                          for length, ids in zip(expected.input_lengths, expected.id_counts, strict=True))
            if abs(got - trapped) <= TOKENS_TOLERANCE * trapped:
                why += (f" ({want / got:.1f}x short): the replay's --timed-trace-chunk-hash-size was vLLM's "
                        f"default {DEFAULT_CHUNK}, not the recording's block of {expected.block}")
        checks.append(Check(name, ok, want, got, why))
    duration = served.get("duration_s")
    span = expected.span_s / speed
    checks.append(Check("span", duration is not None and duration >= SPAN_FLOOR * span, round(span, 3), duration,
                        f"the replay took {duration if duration is None else round(duration, 1)} s, under "
                        f"{SPAN_FLOOR:.0%} of the recording's span of {span:.1f} s"
                        + (f" at {speed:g}x" if speed != 1 else "") + ": its arrival times were not kept"))
    for name, lengths in (("prompt_buckets", expected.input_lengths),
                          ("generation_buckets", expected.output_lengths)):
        buckets = served.get(name)
        if not buckets:
            continue
        bounds, seen = _histogram_cumulative({float(k): float(v) for k, v in buckets.items()})
        want = _cumulative(lengths, bounds)
        gap = max((abs(a - b) for a, b in zip(want, seen, strict=True)), default=0.0)
        checks.append(Check(name, gap <= DISTRIBUTION_TOLERANCE, 0.0, round(gap, 4),
                            f"the server's {name.split('_')[0]} lengths differ from the recording's by "
                            f"{gap:.0%} of the requests at one bucket (at most {DISTRIBUTION_TOLERANCE:.0%})"))
    return Fidelity(all(c.ok for c in checks), tuple(checks))
