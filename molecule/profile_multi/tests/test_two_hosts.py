"""profile.yml on two hosts at once, one of which fails mid-campaign."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import testinfra

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "resources"))

from testlib import UNIT, run_playbook

GOOD, BAD = "vllm-mol-multi-a", "vllm-mol-multi-b"


def test_one_failing_host_leaves_the_other_to_finish_and_both_restored(tmp_path):
    hosts = {name: testinfra.get_host(f"podman://{name}") for name in (GOOD, BAD)}
    hosts[BAD].check_output("touch /run/vllm-standin/truncate-trace-rank-0")
    try:
        play = run_playbook("profile.yml", "-e", json.dumps({"vllm_job_artifacts_dir": str(tmp_path)}))
    finally:
        hosts[BAD].run("rm -f /run/vllm-standin/* /var/lib/vllm/traces/vllm-ops-*")
    assert play.rc != 0
    assert play.data["stats"][GOOD]["failures"] == 0
    assert play.data["stats"][BAD]["failures"] == 1
    (good_dir,) = [d for d in (tmp_path / GOOD).iterdir() if d.is_dir()]
    assert (good_dir / "report.md").exists() and (good_dir / "decode.png").exists()
    assert len((tmp_path / GOOD / "history.csv").read_text().splitlines()) == 2
    assert not (tmp_path / BAD / "history.csv").exists()
    for name, host in hosts.items():
        assert host.run(f"systemctl is-active {UNIT}").stdout.strip() == "active", name
        assert not host.file(f"/etc/systemd/system/{UNIT}.service.d/50-variant.conf").exists, name
        assert host.run("curl -sf -o /dev/null http://127.0.0.1:8000/health").rc == 0, name


def test_a_spread_experiment_deals_the_variants_and_compares_each_with_its_own_baseline(tmp_path):
    # Two variants over two hosts: one each (round-robin over the sorted hosts), both loaded at
    # once; each host measures its own baseline, and the fleet's report compares each variant with it.
    variants = [{"name": "ngram", "extra_args": ["--speculative-config",
                                                 '{"method": "ngram", "num_speculative_tokens": 3}']},
                {"name": "NCCL_PROTO=LL128", "environment": {"NCCL_PROTO": "LL128"}}]
    play = run_playbook("experiment.yml", "-e", json.dumps({
        "vllm_job_artifacts_dir": str(tmp_path), "vllm_experiment_variants": variants,
        "vllm_experiment_spread": True, "vllm_experiment_bench_load": {"concurrencies": [1], "repeats": 1}}))
    assert play.rc == 0, play.output[-4000:]
    records = {}
    for name in (GOOD, BAD):
        (directory,) = [d for d in (tmp_path / name).iterdir() if d.is_dir()]
        records[name] = json.loads((directory / "experiment.json").read_text())
    assert [v["name"] for v in records[GOOD]["variants"]] == ["ngram"]
    assert [v["name"] for v in records[BAD]["variants"]] == ["NCCL_PROTO=LL128"]
    assert records[GOOD]["id"] == records[BAD]["id"]
    for record in records.values():
        assert {r["round"] for r in record["runs"] if r["variant"] == "baseline"} == {1, 2}

    fleet = tmp_path / "fleet" / records[GOOD]["id"]
    report = json.loads((fleet / "report.json").read_text())
    assert report["kind"] == "fleet" and sorted(report["hosts"]) == [GOOD, BAD]
    by_name = {v["name"]: v for v in report["variants"]}
    assert by_name["ngram"]["host"] == GOOD and by_name["NCCL_PROTO=LL128"]["host"] == BAD
    # Each change is against its own host's baseline, recomputed here from that host's files.
    for name, variant in ((GOOD, "ngram"), (BAD, "NCCL_PROTO=LL128")):
        directory = tmp_path / name / records[name]["id"]
        values = {v: [json.loads((directory / r["file"]).read_text())["median_tpot_ms"]
                      for r in records[name]["runs"] if r["variant"] == v] for v in ("baseline", variant)}
        base = sorted(values["baseline"])[0] / 2 + sorted(values["baseline"])[1] / 2  # the median of two
        change = 100 * (values[variant][0] / base - 1)
        # report.json gives percentages to 4 decimals.
        assert by_name[variant]["headline"]["tpot"]["change_pct"] == pytest.approx(change, abs=5e-5)
    assert report["ranking"][0]["name"] == "ngram"
    assert (fleet / "report.md").exists() and (fleet / "throughput.png").exists()
    said = [t for p in play.data["plays"] for t in p["tasks"] if t["task"]["name"] == "Print the fleet's headline"]
    assert said and next(iter(said[0]["hosts"].values()))["msg"].startswith(f"fleet: best: ngram @ {GOOD}: TPOT -")
    for name in (GOOD, BAD):
        host = testinfra.get_host(f"podman://{name}")
        assert host.run(f"systemctl is-active {UNIT}").stdout.strip() == "active", name
        assert not host.file(f"/etc/systemd/system/{UNIT}.service.d/50-variant.conf").exists, name
