"""What the experiment role hands between its tasks: the server variant the vllm role applies, the
runs it records and each variant's outcome. Plain functions behind the role's filters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath

__all__ = ["outcomes", "runs", "server_variant"]

_SERVER_KEYS = ("name", "environment", "extra_args", "profile")


def server_variant(variant: Mapping) -> dict:
    """The ``vllm_variant`` of an experiment's variant: only the keys the vllm role knows."""
    return {key: variant[key] for key in _SERVER_KEYS if key in variant}


def runs(results: Sequence[Mapping], variant: str, round_: int, directory: str) -> list[dict]:
    """One record per benchmark point from the registered loop of ``vllm_bench_serve`` (whose
    ``item`` is ``[concurrency, repeat]``): where its fetched result lies and its /metrics deltas."""
    out = []
    for result in results:
        concurrency, repeat = result["item"]
        out.append({
            "variant": variant,
            "round": int(round_),
            "concurrency": int(concurrency),
            "repeat": int(repeat),
            "file": str(PurePosixPath(directory) / PurePosixPath(result["path"]).name),
            "metrics": dict(result.get("metrics") or {}),
        })
    return out


def outcomes(variants: Sequence[Mapping], recorded: Mapping[str, Mapping]) -> list[dict]:
    """Each variant of this host with its outcome: ``ok``, ``failed`` (with its failure), or
    ``not run`` (the experiment stopped before it)."""
    out = []
    for variant in variants:
        outcome = recorded.get(variant["name"]) or {"status": "not run"}
        out.append({
            "name": variant["name"],
            "environment": dict(variant.get("environment") or {}),
            "extra_args": [str(a) for a in variant.get("extra_args") or []],
            "profile": bool(variant.get("profile", False)),
            "status": outcome["status"],
            "failure": outcome.get("failure"),
            # A profiled variant: its campaign report (relative to the experiment) and headline.
            "profile_report": outcome.get("profile_report"),
            "profile_headline": outcome.get("profile_headline"),
        })
    return out
