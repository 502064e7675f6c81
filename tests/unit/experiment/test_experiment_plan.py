"""What the experiment role records between its tasks (vllm_ops.experiment.plan)."""

from __future__ import annotations

from vllm_ops.experiment.plan import outcomes, runs, server_variant


def test_the_vllm_role_gets_only_the_keys_it_knows():
    variant = {"name": "x", "environment": {"NCCL_PROTO": "LL128"}, "extra_args": ["--max-num-seqs", "8"],
               "label": "ignored", "profile": True}
    assert server_variant(variant) == {"name": "x", "environment": {"NCCL_PROTO": "LL128"},
                                       "extra_args": ["--max-num-seqs", "8"], "profile": True}


def test_runs_from_the_registered_benchmark_loop():
    results = [{"item": [1, 1], "path": "/var/lib/vllm-ops/experiments/id/02/c1-r1.json",
                "metrics": {"request_success_total": 8.0}},
               {"item": [4, 2], "path": "/var/lib/vllm-ops/experiments/id/02/c4-r2.json", "metrics": {}}]
    assert runs(results, "ngram", "1", "bench/02") == [
        {"variant": "ngram", "round": 1, "concurrency": 1, "repeat": 1, "file": "bench/02/c1-r1.json",
         "metrics": {"request_success_total": 8.0}},
        {"variant": "ngram", "round": 1, "concurrency": 4, "repeat": 2, "file": "bench/02/c4-r2.json",
         "metrics": {}}]


def test_each_variant_has_an_outcome_also_when_it_never_ran():
    variants = [{"name": "a", "environment": {"NCCL_PROTO": "LL128"}},
                {"name": "b", "extra_args": ["--x"]}, {"name": "c", "extra_args": ["--y"]}]
    failure = {"stage": "load", "message": "did not become healthy", "journal": ["l1"]}
    got = outcomes(variants, {"a": {"status": "ok"}, "b": {"status": "failed", "failure": failure}})
    assert [(v["name"], v["status"], v["failure"]) for v in got] == [
        ("a", "ok", None), ("b", "failed", failure), ("c", "not run", None)]
    assert got[1]["extra_args"] == ["--x"] and got[0]["environment"] == {"NCCL_PROTO": "LL128"}
