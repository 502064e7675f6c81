"""The traffic recordings on the controller: which of a host's to fetch, and the report of their mix.

``playbooks/traffic.yml`` fetches what each host's recorder (:mod:`vllm_ops_host.traffic`) wrote into the
artifacts, and this module reports it (``vllm-traffic-report``)::

    artifacts/traffic/<host>/traffic-<start>-<epoch>.jsonl   one window of the host's recorder, as the host had it
        traffic-<start>-<epoch>.json                         its sidecar (block, epoch, vLLM's version, counts)
    artifacts/traffic/mix.json      the figures below, per host and over all hosts together
    artifacts/traffic/traffic.md    the report
    artifacts/traffic/traffic.png   the chart: arrivals per minute, prompt and completion lengths, a colour a host

Definitions:

- **a recording** is a ``.jsonl`` with its ``.json`` sidecar; a ``.jsonl`` without one (the recorder opened
  it a moment ago, or removed the sidecar first) is not fetched, and one fetched so is named, not read.
- **a recording's span on the host**, before it is fetched: from the start its name gives (UTC, to the
  second) to its ``.jsonl``'s last change (never before its last request's arrival). It holds the
  sidecar's [start, end], so a recording left out by the window (:func:`overlaps`) has no request in it.
- **to fetch** (:func:`pending`): of a host's recordings whose span overlaps the window, those the
  controller does not hold as the host has them: its ``.jsonl`` of another size (the recorder only
  appends, so the same size is the same lines) or its sidecar of other content (sha1: its counts). A
  window the recorder closed is fetched once; the one it writes, again each time it grew or counted.
- **the window** (``--since``, ``--until``; the role's ``vllm_traffic_since``, ``vllm_traffic_until``):
  [since, until), ISO 8601 (UTC without an offset) or Unix seconds; empty: unbounded on that side.
- **a host's mix** (:func:`host_summary`): :func:`vllm_ops.traffic.mix` of the requests of its
  recordings (:func:`vllm_ops.traffic.read`) that arrived in the window (:func:`vllm_ops.traffic.select`).
  A replay sends one block size, so of recordings of several the newest's block is read and the others
  named (``other_block``). **Recorded**: its lines in the window, replayable or not. **The recorder's
  counts** (``requests``, ``dropped``, ``own``, ``errors``, ``failed_tokenize``): summed over the sidecars
  whose [start, end] overlaps the window. **Partial**: last lines left out, cut where the recorder was
  writing them when the window was fetched (whole at the next fetch).
- **all hosts**: the mix of every host's requests in the window together; ids compare within one
  recorder process, so no block is shared across hosts. Its block is the hosts' when they agree, else none.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from . import traffic
from .artifacts import write_json, write_text
from .charts import PALETTE, figure, save_png
from .cliutil import run_command
from .render import render
from .traffic import TrafficInputError

__all__ = ["MIX_JSON", "PNG", "REPORT", "TRAFFIC", "headline", "host_summary", "overlaps", "parse_time", "pending",
           "summary", "write_chart"]

PROG = "vllm-traffic-report"
TRAFFIC = "traffic"  # under the artifacts: one directory a host, and the report's files
MIX_JSON = "mix.json"
REPORT = "traffic.md"
PNG = "traffic.png"
MIX_SCHEMA = "vllm-ops/traffic-mix/1"
RECORDING = re.compile(r"^traffic-.*\.jsonl$")
NAME_START = re.compile(r"^traffic-(\d{8}T\d{6}Z)-")  # the recorder's names: the window's start, UTC
COUNTS = ("requests", "dropped", "own", "errors", "failed_tokenize")
TIME_FORMS = "ISO 8601 (2026-12-04T10:00:00Z; UTC without an offset) or Unix seconds"


# ------------------------------------------------------------------------------------------- times

def parse_time(text: object, what: str) -> float | None:
    """``text`` as Unix seconds (see the module's docstring); None for empty."""
    if text is None or not str(text).strip():
        return None
    value = str(text).strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise TrafficInputError(f"{what} {value!r}: not a time: {TIME_FORMS}") from None
        seconds = (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()
    if not math.isfinite(seconds):
        raise TrafficInputError(f"{what} {value!r}: not a time: {TIME_FORMS}")
    return seconds


def iso(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def overlaps(start: float | None, end: float | None, since: float | None, until: float | None) -> bool:
    """Whether [start, end] (None: unknown, taken as unbounded) meets the window [since, until)."""
    return ((until is None or start is None or start < until)
            and (since is None or end is None or end >= since))


def _window(since: float | None, until: float | None) -> tuple[float | None, float | None]:
    if since is not None and until is not None and since >= until:
        raise TrafficInputError(f"the window is empty: since {iso(since)} is not before until {iso(until)}")
    return since, until


def _name_start(name: str) -> float | None:
    found = NAME_START.match(name)
    if not found:
        return None
    return datetime.strptime(found.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC).timestamp()


# ------------------------------------------------------------------------------------------- fetch

def _sha1(path: Path) -> str | None:
    try:
        return hashlib.sha1(path.read_bytes()).hexdigest()  # ansible.builtin.find's checksum
    except OSError:
        return None


def pending(host_dir: str | Path, found: Iterable[Mapping], since: float | None = None,
            until: float | None = None) -> dict:
    """Of the host's files ``found`` (``ansible.builtin.find``'s: ``path``, ``size``, ``mtime``, and the
    sidecars' ``checksum``), the recordings to fetch into ``host_dir`` (``artifacts/traffic/<host>``; see the
    module's docstring). ``{fetch: [names, each .jsonl then its .json], recordings: in the window on the
    host, outside: left out by the window, unpaired: .jsonl names without a sidecar}``."""
    since, until = _window(since, until)
    files = {Path(str(f["path"])).name: f for f in found}
    out: dict = {"fetch": [], "recordings": 0, "outside": 0, "unpaired": []}
    for name in sorted(n for n in files if RECORDING.match(n)):
        sidecar_name = Path(name).with_suffix(".json").name
        sidecar = files.get(sidecar_name)
        if sidecar is None:
            out["unpaired"].append(name)
            continue
        mtime, size = files[name].get("mtime"), files[name].get("size")
        if not overlaps(_name_start(name), None if mtime is None else float(mtime), since, until):
            out["outside"] += 1
            continue
        out["recordings"] += 1
        here = Path(host_dir) / name
        # what find did not say (a size, a checksum) is taken as changed: fetched
        same = (here.is_file() and size is not None and here.stat().st_size == int(size)
                and sidecar.get("checksum") is not None and _sha1(here.with_suffix(".json")) == sidecar["checksum"])
        if not same:
            out["fetch"] += [name, sidecar_name]
    return out


# ------------------------------------------------------------------------------------------- report

def _sidecar_block(path: Path) -> int | None:
    try:
        return int(json.loads(path.with_suffix(".json").read_text())["block"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # read() says what is wrong with it


def host_summary(host_dir: Path, since: float | None = None, until: float | None = None) -> dict:
    """One host's recordings in the window and their mix (see the module's docstring)."""
    names = sorted(host_dir.glob("traffic-*.jsonl"))
    paired = [p for p in names if p.with_suffix(".json").is_file()]
    blocks = {p: _sidecar_block(p) for p in paired}
    newest = blocks[paired[-1]] if paired else None
    used = [p for p in paired if blocks[p] in (newest, None)]
    host = {"host": host_dir.name, "dir": str(host_dir), "files": len(used),
            "unpaired": [p.name for p in names if p not in paired],
            "other_block": [p.name for p in paired if p not in used]}
    if not used:
        return host | {"block": None, "versions": [], "partial": 0, "recorded": 0, "first": None, "last": None,
                       "counts": dict.fromkeys(COUNTS, 0), "prefix_partial": False, "requests": [],
                       "mix": traffic.mix([], 0)}
    try:
        recording = traffic.read(used)
    except TrafficInputError as exc:
        raise TrafficInputError(f"{host_dir}: {exc}") from None
    window = traffic.select(recording, since, until)
    sidecars = [s for s in recording.sidecars if overlaps(s.get("start"), s.get("end"), since, until)]
    arrivals = [r.arrival for r in window.requests]
    return host | {
        "block": recording.block, "versions": sorted({str(s["vllm_version"]) for s in sidecars
                                                      if s.get("vllm_version")}),
        "partial": recording.partial, "recorded": len(window.requests),
        "first": min(arrivals, default=None), "last": max(arrivals, default=None),
        "counts": {k: sum(int(s.get(k) or 0) for s in sidecars) for k in COUNTS},
        "prefix_partial": any(s.get("prefix") == "partial" for s in sidecars),
        "requests": window.requests, "mix": traffic.mix(window.requests, recording.block)}


def summary(artifacts: str | Path, since: float | None = None, until: float | None = None) -> dict:
    """Every host's recordings under ``artifacts/traffic/`` in the window: per host, and all together."""
    since, until = _window(since, until)
    root = Path(artifacts).absolute() / TRAFFIC
    dirs = sorted(d for d in root.iterdir() if d.is_dir() and any(d.glob("traffic-*.jsonl"))) if root.is_dir() else []
    if not dirs:
        raise TrafficInputError(f"no recording under {root}/<host>/: fetch them with playbooks/traffic.yml first")
    hosts = [host_summary(d, since, until) for d in dirs]
    if not any(h["recorded"] for h in hosts):
        asked = since is not None or until is not None
        window = f" from {iso(since) or 'the first'} to {iso(until) or 'the last'}" if asked else ""
        raise TrafficInputError(f"no request{window} in the recordings of {len(hosts)} host(s) under {root}: ask "
                                "another window (--since, --until) or fetch newer ones with playbooks/traffic.yml")
    every = sorted((r for h in hosts for r in h["requests"]), key=lambda r: r.arrival)
    blocks = {h["block"] for h in hosts if h["recorded"]}
    block = blocks.pop() if len(blocks) == 1 else None
    return {"dir": str(root), "since": since, "until": until, "hosts": hosts,
            "all": {"recorded": len(every), "block": block, "first": every[0].arrival, "last": every[-1].arrival,
                    "counts": {k: sum(h["counts"][k] for h in hosts) for k in COUNTS},
                    "partial": sum(h["partial"] for h in hosts), "mix": traffic.mix(every, block)}}


def _first_replayable(requests: list) -> float | None:
    return next((r.arrival for r in requests if r.replayable), None)


def mix_json(s: Mapping) -> dict:
    """``mix.json``: the window, and per host and over all hosts the figures of the module's docstring."""
    def entry(h: Mapping) -> dict:
        return {"recorded": h["recorded"], "first": iso(h["first"]), "last": iso(h["last"]), "block": h["block"],
                "counts": h["counts"], "partial": h["partial"], "mix": h["mix"]}

    return {"schema": MIX_SCHEMA, "window": {"since": iso(s["since"]), "until": iso(s["until"])},
            "hosts": {h["host"]: entry(h) | {"dir": h["dir"], "files": h["files"], "versions": h["versions"],
                                             "prefix_partial": h["prefix_partial"], "unpaired": h["unpaired"],
                                             "other_block": h["other_block"]} for h in s["hosts"]},
            "all": entry(s["all"])}


# ------------------------------------------------------------------------------------------- words

def duration_words(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds >= 5400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.1f} s"


def _num(value: float | None, spec: str = ",.0f") -> str:
    return "-" if value is None else format(value, spec)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _lengths(figures: Mapping) -> str:
    return (f"p50 {_num(figures['p50'])}, p90 {_num(figures['p90'])}, p99 {_num(figures['p99'])}, "
            f"max {_num(figures['max'])}")


def _words(h: Mapping) -> dict:
    """The figures of a host (or of all hosts) in words, for the report."""
    m = h["mix"]
    counts = h["counts"]
    rate = "-" if m["rate_per_s"] is None else f"{m['rate_per_s']:.3g}/s"
    return {
        "window": f"{iso(h['first']) or '-'} to {iso(h['last']) or '-'}",
        "span": duration_words(m["span_s"]) if m["requests"] else "-",
        "requests": f"{m['requests']:,}", "recorded": f"{h['recorded']:,}", "left_out": f"{m['left_out']:,}",
        "rate": rate, "burstiness": _num(m["burstiness"], ".2f"),
        "input": _lengths(m["input"]), "output": _lengths(m["output"]),
        "input_tokens": f"{m['input']['tokens']:,}", "output_tokens": f"{m['output']['tokens']:,}",
        "repeated": _share(m["prefix"]["repeated_share"]), "shared_first": _share(m["prefix"]["shared_first_share"]),
        "blocks": f"{m['prefix']['blocks']:,}", "block": h["block"] if h["block"] is not None else "-",
        "counts": {k: f"{counts[k]:,}" for k in COUNTS}, "partial": h["partial"],
    }


def headline(s: Mapping) -> str:
    a = s["all"]
    active = sum(1 for h in s["hosts"] if h["recorded"])
    return (f"{a['mix']['requests']:,} replayable request(s) of {a['recorded']:,} recorded on {active} of "
            f"{len(s['hosts'])} host(s), {iso(a['first'])} to {iso(a['last'])}")


def host_line(h: Mapping) -> str:
    """One line a host: its requests, rate, burstiness, lengths, sharing and the recorder's losses."""
    if not h["recorded"]:
        return f"{h['host']}: no request in the window ({h['files']} recording(s))"
    w = _words(h)
    m = h["mix"]
    return (f"{h['host']}: {w['requests']} request(s) over {w['span']}, {w['rate']}, burstiness {w['burstiness']}; "
            f"prompt p50 {_num(m['input']['p50'])} p99 {_num(m['input']['p99'])}, completion p50 "
            f"{_num(m['output']['p50'])} p99 {_num(m['output']['p99'])}; {w['repeated']} of blocks seen before; "
            f"dropped {w['counts']['dropped']}, errors {w['counts']['errors']}, own {w['counts']['own']}")


# ------------------------------------------------------------------------------------------- chart

def _bucket_label(le: int) -> str:
    return f"≤{le // 1024}k" if le >= 1024 else f"≤{le}"


def write_chart(s: Mapping, path: str | Path) -> dict:
    """Arrivals per minute over time, then the prompt and the completion lengths' power-of-two histograms,
    a colour a host. PNG, atomic write. Returns ``{path, hosts}`` (hosts drawn)."""
    hosts = [h for h in s["hosts"] if h["mix"]["requests"]]
    colours = (PALETTE[::2] + PALETTE[1::2]) * 8  # neighbours in the palette are shades of one colour
    fig = figure(9.0, 9.0)
    arrivals, *lengths = fig.subplots(3, 1)
    origin = min((_first_replayable(h["requests"]) for h in hosts), default=None)
    for i, h in enumerate(hosts):
        offset = (_first_replayable(h["requests"]) - origin) / 60
        counts = h["mix"]["per_minute"]
        minutes = [offset + m for m in range(len(counts) + 1)]
        arrivals.step(minutes, [*counts, counts[-1]], where="post", color=colours[i], label=h["host"])
    arrivals.set_xlabel(f"minutes since {iso(origin) or '-'}")
    arrivals.set_ylabel("requests a minute")
    arrivals.set_title("Arrivals", fontsize=10)
    for ax, key, what in zip(lengths, ("input", "output"), ("Prompt", "Completion"), strict=True):
        # the buckets from the first that holds a request on any host
        low = min((b["le"] for h in hosts for b in h["mix"][key]["histogram"] if b["count"]), default=0)
        bounds = sorted({b["le"] for h in hosts for b in h["mix"][key]["histogram"] if b["le"] >= low})
        width = 0.8 / max(1, len(hosts))
        for i, h in enumerate(hosts):
            got = {b["le"]: b["count"] for b in h["mix"][key]["histogram"]}
            ax.bar([j + (i - (len(hosts) - 1) / 2) * width for j in range(len(bounds))],
                   [got.get(b, 0) for b in bounds], width=width, color=colours[i], label=h["host"])
        ax.set_xticks(range(len(bounds)), [_bucket_label(b) for b in bounds], fontsize=8)
        ax.set_xlabel("tokens")
        ax.set_ylabel("requests")
        ax.set_title(f"{what} lengths", fontsize=10)
    for ax in (arrivals, *lengths):
        ax.grid(True, alpha=0.3)
        ax.yaxis.get_major_locator().set_params(integer=True)
        if hosts:
            ax.legend(fontsize=8)
        else:
            ax.text(0.5, 0.5, "no replayable request in the window", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(f"The load users sent\n{headline(s)}", fontsize=10)
    return {"path": str(save_png(fig, path)), "hosts": len(hosts)}


# ------------------------------------------------------------------------------------------- command

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="The traffic recordings fetched by playbooks/traffic.yml: "
                                                       "which to fetch, and the report of their mix.",
                                epilog="Exit status: 0 on success, 2 on bad input or usage (one line on stderr).")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    window = argparse.ArgumentParser(add_help=False)
    window.add_argument("--since", default="", help=f"the window's start: {TIME_FORMS}; empty: unbounded")
    window.add_argument("--until", default="", help="the window's end (not included); empty: unbounded")
    f = sub.add_parser("pending", parents=[window],
                       help="of a host's recordings (ansible.builtin.find's files as JSON on stdin), those to "
                            "fetch, as JSON")
    f.add_argument("dir", metavar="DIR", help="the host's fetched recordings (artifacts/traffic/HOST)")
    r = sub.add_parser("report", parents=[window],
                       help="write DIR/traffic/mix.json, traffic.md and traffic.png over every host's recordings; "
                            "print one line a host")
    r.add_argument("dir", metavar="DIR", help="the artifacts directory (DIR/traffic/HOST/ inside)")
    r.add_argument("--template", help="a report template instead of the shipped traffic_report.md.j2")
    return p


def _found(text: str) -> list[Mapping]:
    try:
        found = json.loads(text)
    except ValueError as exc:
        raise TrafficInputError(f"the host's files on stdin: not JSON ({exc})") from None
    if not isinstance(found, list) or not all(isinstance(f, Mapping) and "path" in f for f in found):
        raise TrafficInputError("the host's files on stdin: not a list of ansible.builtin.find's files")
    return found


def report(artifacts: str | Path, since: float | None, until: float | None, template: str | None = None) -> list[str]:
    """Write the report's three files; the lines to print."""
    s = summary(artifacts, since, until)
    root = Path(s["dir"])
    write_json(root / MIX_JSON, mix_json(s))
    chart = write_chart(s, root / PNG)
    hosts = [h | {"words": _words(h), "replay": h["dir"]} for h in s["hosts"]]
    variables = {"s": s, "hosts": hosts, "all": _words(s["all"]), "headline": headline(s),
                 "window": {"since": iso(since) or "the first request", "until": iso(until) or "the last request"},
                 "chart": Path(chart["path"]).name}
    out = write_text(root / REPORT, render(template, "traffic_report.md.j2", variables, error=TrafficInputError))
    return [*(host_line(h) for h in s["hosts"]), f"report: {out}, {root / MIX_JSON}, {chart['path']}", headline(s)]


def run(args: argparse.Namespace) -> list[str]:
    since, until = parse_time(args.since, "--since"), parse_time(args.until, "--until")
    if args.command == "pending":
        return [json.dumps(pending(args.dir, _found(sys.stdin.read()), since, until))]
    return report(args.dir, since, until, args.template)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command(PROG, lambda: "\n".join(run(args)))


if __name__ == "__main__":
    sys.exit(main())
