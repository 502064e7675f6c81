"""Helpers of the tune's tests: a tune's directory as the vllm_tune role leaves it (tune.json,
the summary of its profile, the pre-screen's floors, the benchmark's record and results), written in
tmp_path with figures chosen here, so that every expected value is computed in the test."""

from __future__ import annotations

import json
from pathlib import Path

from vllm_ops.traces.experiments import data_form

UNIT = {"environment": {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_MAX_NCHANNELS": 16},
        "extra_args": ["--trust-remote-code"]}
COMM_NEXT = [data_form("an NCCL sweep on PCIe", "nccl-sweep"), data_form("speculative decoding", "speculative")]
HOST_NEXT = [data_form("find what slows rank 1's host", None), data_form("turn CUDA graphs on", "cuda-graphs")]
# The served all-reduce of the traces these tests stand for (the H200 pair's: NCCL's kernels only).
NCCL_SERVED = {"path": "nccl", "words": "NCCL's (its kernels hold 100% of the decode all-reduce)"}


def summary(next_tests, kind="communication-bound", transfer_ms=10.0, ledger=None) -> dict:
    s = {"verdict": {"kind": kind, "rank": None, "category": None, "evidence": {"allreduce_transfer_ms": transfer_ms},
                     "next": [t["text"] for t in next_tests], "next_tests": next_tests},
         # the decode all-reduce, all of it in NCCL's kernels
         "allreduce": {"ms_per_step_mean": transfer_ms, "nccl_ms_per_step_mean": transfer_ms}}
    if ledger is not None:
        s["ledger"] = ledger
    return s


def floor(label: str, median: float, spread=(0.98, 1.02)) -> dict:
    """allreduce_bench.py's JSON with one decode size (batch 1, Kimi-K2.5's 14336 bytes) and a ladder size."""
    return {"schema": 1, "tool": "allreduce_bench", "label": label, "backend": "gloo", "world_size": 2,
            "sizes": [{"bytes": 1024, "batch_size": None, "median_us": median / 2, "min_us": median / 2 * spread[0],
                       "p90_us": median / 2 * spread[1]},
                      {"bytes": 14336, "batch_size": 1, "median_us": median, "min_us": median * spread[0],
                       "p90_us": median * spread[1]}]}


def bench(tpot: float, thr: float) -> dict:
    d = {"completed": 8, "failed": 0, "output_throughput": thr, "duration": 1.0, "num_prompts": 8,
         "max_concurrency": 1}
    for x in ("ttft", "tpot", "itl", "e2el"):
        d[f"median_{x}_ms"] = tpot
        d[f"p99_{x}_ms"] = tpot * 1.2
    return d


def write_experiment(d: Path, series: dict, unit=UNIT, concurrencies=(1, 4)) -> None:
    """``series``: name -> (environment, extra_args, [TPOT at the lowest concurrency per repeat],
    [throughput at the highest per repeat]); "baseline" is the normal service, "baseline@2" the same
    measured again after the restore (round 2)."""
    exp = d / "experiment"
    runs, variants = [], []
    for key, (env, args, tpots, thrs) in series.items():
        name, _, rnd = key.partition("@")
        if name != "baseline":
            variants.append({"name": name, "environment": env, "extra_args": args, "profile": False, "status": "ok",
                             "failure": None})
        for rep, (tpot, thr) in enumerate(zip(tpots, thrs, strict=True), 1):
            for conc, result in ((concurrencies[0], bench(tpot, 100.0)), (concurrencies[1], bench(30.0, thr))):
                file = f"bench/{name}-{rnd or 1}/c{conc}-r{rep}.json"
                (exp / file).parent.mkdir(parents=True, exist_ok=True)
                (exp / file).write_text(json.dumps(result))
                runs.append({"variant": name, "round": int(rnd or 1), "concurrency": conc, "repeat": rep, "file": file,
                             "metrics": {}})
    record = {"id": "20261201T120000Z", "host": "h1", "started_at": "2026-12-01T12:00:00Z",
              "finished_at": "2026-12-01T12:10:00Z", "model": "kimi-k2.5", "vllm_version": "0.32.0",
              "load": {"input_len": 32, "output_len": 16, "num_prompts": 8, "concurrencies": list(concurrencies),
                       "repeats": len(next(iter(series.values()))[2]), "warmups": 1},
              "noise_floor_pct": 1.0, "base": unit, "variants": variants, "runs": runs}
    (exp / "experiment.json").write_text(json.dumps(record))
