"""What the experiment role hands between its tasks: the server variant the vllm role applies, the
runs it records and each variant's outcome. Plain functions behind the role's filters."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath

from .. import traffic

__all__ = ["outcomes", "runs", "served", "server_variant"]

_SERVER_KEYS = ("name", "environment", "extra_args", "profile")


def server_variant(variant: Mapping) -> dict:
    """The ``vllm_variant`` of an experiment's variant: only the keys the vllm role knows."""
    return {key: variant[key] for key in _SERVER_KEYS if key in variant}


def served(result: Mapping) -> dict:
    """What the server counted during one run of ``vllm_bench_serve`` (its /metrics differences and the
    benchmark's summary), in the terms of :func:`vllm_ops.traffic.fidelity`."""
    metrics, hist, summary = result.get("metrics") or {}, result.get("histograms") or {}, result.get("summary") or {}
    return {"requests": metrics.get("request_success_total"), "failed": summary.get("failed"),
            "input_tokens": metrics.get("prompt_tokens_total"), "output_tokens": metrics.get("generation_tokens_total"),
            "duration_s": summary.get("duration"),
            "prompt_buckets": hist.get("request_prompt_tokens"),
            "generation_buckets": hist.get("request_generation_tokens")}


def runs(results: Sequence[Mapping], variant: str, round_: int, directory: str,
         expected: Mapping | None = None, speed: float = 1.0) -> list[dict]:
    """One record per benchmark point from the registered loop of ``vllm_bench_serve`` (whose
    ``item`` is ``[concurrency, repeat]``): where its fetched result lies and its /metrics deltas; with
    ``expected`` (a replay's, :meth:`vllm_ops.traffic.Expected.to_json`) whether the run reproduced
    the recording (``fidelity``), judged from what the server counted, ``speed`` times as fast."""
    want = traffic.Expected.from_json(expected) if expected else None
    out = []
    for result in results:
        concurrency, repeat = result["item"]
        run = {
            "variant": variant,
            "round": int(round_),
            "concurrency": int(concurrency),
            "repeat": int(repeat),
            "file": str(PurePosixPath(directory) / PurePosixPath(result["path"]).name),
            "metrics": dict(result.get("metrics") or {}),
        }
        if want is not None:
            run["fidelity"] = traffic.fidelity(want, served(result), float(speed)).to_json()
        out.append(run)
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
