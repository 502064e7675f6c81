"""experiment.yml on the sandbox with the vLLM stand-in: the baseline and three variants
(examples/experiments/sandbox.yml), the lock shared with the campaign, interruption and check mode.

The stand-in answers `vllm bench serve` with a real client measuring its own streamed completions,
and it models ngram speculation (molecule/resources/standin/README.md): that variant must win,
NCCL_PROTO=LL128 (no NCCL in a stand-in) must be "no change", the draft model at a missing path
must fail to load. Expected figures are computed here from the fetched benchmark JSON files.
"""

from __future__ import annotations

import csv
import json
import re
import statistics

import pytest

from testlib import FAULT_DIR, LOCK, ROOT, UNIT, assert_normal_service, run_playbook, start_playbook, wait_for

DROPIN = f"/etc/systemd/system/{UNIT}.service.d/50-variant.conf"
VARIANT_ENV = f"/etc/vllm/{UNIT}.variant.env"
SANDBOX_EXAMPLE = "@" + str(ROOT / "examples/experiments/sandbox.yml")


def experiment(tmp_path, *args):
    artifacts = tmp_path / "artifacts"
    play = run_playbook("experiment.yml", "-e", SANDBOX_EXAMPLE,
                        "-e", json.dumps({"vllm_job_artifacts_dir": str(artifacts)}), *args)
    return play, artifacts


def invocation(host):
    return host.check_output(f"systemctl show {UNIT} -p InvocationID --value")


def center(directory, runs, variant, concurrency, key):
    """The median over the runs of one figure of vllm bench serve's JSON, read here."""
    values = [json.loads((directory / r["file"]).read_text())[key] for r in runs
              if r["variant"] == variant and r["concurrency"] == concurrency]
    assert values, (variant, concurrency)
    return statistics.median(values), values


def test_an_experiment_ranks_the_variants_records_the_failure_and_restores(host, tmp_path):
    play, artifacts = experiment(tmp_path)
    assert play.rc == 0, play.output[-5000:]
    (directory,) = [p for p in (artifacts / "vllm-mol-experiment").iterdir() if p.is_dir()]
    record = json.loads((directory / "experiment.json").read_text())
    report = json.loads((directory / "report.json").read_text())
    runs = record["runs"]

    # Both baselines and the two variants that served, every point, every repeat.
    for variant, rounds in (("baseline", {1, 2}), ("ngram", {1}), ("NCCL_PROTO=LL128", {1})):
        for concurrency in (1, 4):
            got = [r for r in runs if r["variant"] == variant and r["concurrency"] == concurrency]
            assert {r["round"] for r in got} == rounds and len(got) == 2 * len(rounds), (variant, concurrency)
    assert not [r for r in runs if r["variant"] == "draft-missing"]

    # The change of ngram's median TPOT at concurrency 1, from the files themselves.
    base, base_runs = center(directory, runs, "baseline", 1, "median_tpot_ms")
    ngram, ngram_runs = center(directory, runs, "ngram", 1, "median_tpot_ms")
    change = ngram / base - 1
    band = max((max(abs(v - base) for v in base_runs) + max(abs(v - ngram) for v in ngram_runs)) / base, 0.05)
    assert change < -band, "the stand-in's ngram speculation must be a clear win"
    headline = play.result("Print the headline")["msg"]
    said = re.match(r"vllm-mol-experiment: best: ngram: TPOT ([-+]\d+\.\d)% \(\+/-(\d+\.\d)%\) at concurrency 1; ",
                    headline)
    # One decimal in the headline (report.json rounds to four first).
    assert said, headline
    assert float(said.group(1)) == pytest.approx(100 * change, abs=0.051)
    assert float(said.group(2)) == pytest.approx(100 * band, abs=0.051)
    assert "1 failed" in headline

    by_name = {v["name"]: v for v in report["variants"]}
    assert report["ranking"][0]["name"] == "ngram"
    # NCCL_PROTO=LL128 changes nothing the stand-in models on this host (no all-reduce knobs here), so
    # what it measures is the machine's noise, which on a shared CI machine can step outside the band
    # either way (CI saw "worse" once): its category is not asserted, only that it served, ranks below
    # ngram and is counted in the headline under the category the report gives it.
    ll128 = by_name["NCCL_PROTO=LL128"]
    assert ll128["status"] == "ok" and [r["name"] for r in report["ranking"]].index("NCCL_PROTO=LL128") > 0
    phrase = {"no change": "1 variant no change", "worse": "1 worse", "trade-off": "1 trade-off",
              "better": "1 more better"}[ll128["category"]]
    assert phrase in headline
    assert by_name["draft-missing"]["category"] == "failed"
    failure = by_name["draft-missing"]["failure"]
    assert failure["stage"] == "load"
    assert any("no-such-draft" in line for line in failure["journal"]), failure["journal"]

    # NCCL_PROTO=LL128 was also profiled (profile: true): the campaign's capture of the variant as it
    # ran, its record naming the variant's environment, linked from the experiment's report.
    assert by_name["NCCL_PROTO=LL128"]["profile_report"] == "profile/02/report.md"
    profiled = json.loads((directory / "profile/02/campaign.json").read_text())
    assert profiled["variant"] == "NCCL_PROTO=LL128" and profiled["environment"]["NCCL_PROTO"] == "LL128"
    assert len(list((directory / "profile/02").glob("*.pt.trace.json.gz"))) == 2
    assert by_name["NCCL_PROTO=LL128"]["profile_headline"].startswith(
        "vllm-mol-experiment: host-bound on rank 1, not steady")

    # Acceptance from the /metrics counters the module read around each run: the stand-in accepts
    # round(3 x 0.6) = 2 of 3 draft tokens.
    ngram_metrics = [r["metrics"] for r in runs if r["variant"] == "ngram"]
    assert all(m["spec_decode_num_draft_tokens_total"] > 0 for m in ngram_metrics)
    accepted = sum(m["spec_decode_num_accepted_tokens_total"] for m in ngram_metrics)
    drafted = sum(m["spec_decode_num_draft_tokens_total"] for m in ngram_metrics)
    assert accepted / drafted == 2 / 3

    # The report, the charts, a row per variant (and the baseline) and concurrency.
    text = (directory / "report.md").read_text()
    assert headline.split(": ", 1)[1].split(" (")[0] in text
    assert "no-such-draft" in text
    # Every variant is a load: the health poller saw the service down between them.
    gaps = record["downtime"]["gaps"]
    assert gaps >= 2 and f" in {gaps} gaps (longest " in text
    for png in ("throughput.png", "tpot.png"):
        assert (directory / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader((artifacts / "vllm-mol-experiment" / "experiments.csv").open()))
    assert sorted((r["variant"], r["concurrency"]) for r in rows) == sorted(
        (v, c) for v in ("baseline", "ngram", "NCCL_PROTO=LL128", "draft-missing") for c in ("1", "4"))

    # The host ends on the normal service; nothing of the experiment is left on it.
    assert_normal_service(host)
    assert not host.file(VARIANT_ENV).exists and not host.file(LOCK).exists
    assert host.run("ls /var/lib/vllm-ops/experiments").stdout.strip() == ""
    again = run_playbook("playbooks/restore.yml")
    assert again.rc == 0 and again.changed == 0, again.changed_tasks


def test_check_mode_changes_nothing_and_says_what_would_run(host, tmp_path):
    before = invocation(host)
    play, artifacts = experiment(tmp_path, "--check")
    assert play.rc == 0, play.output[-4000:]
    said = play.result("Say what a real run would do")["msg"]
    assert "then 3 variant(s) (ngram, NCCL_PROTO=LL128, draft-missing), each a restart" in said
    assert invocation(host) == before and not (artifacts / "vllm-mol-experiment").exists()


def test_a_variant_that_sets_what_the_role_owns_is_refused_before_anything_changes(host, tmp_path):
    before = invocation(host)
    bad = {"vllm_experiment_variants": [{"name": "p", "extra_args": ["--port", "9000"]}]}
    play, _ = experiment(tmp_path, "-e", json.dumps(bad))
    assert play.rc != 0
    message = play.result("Check the variants as the service's own settings are checked")["msg"]
    assert "vllm_experiment_variants[p].extra_args sets --port, which the role sets itself (vllm_port)" in message
    assert invocation(host) == before and not host.file(LOCK).exists


def test_a_vllm_without_its_benchmark_is_refused_in_the_preflight(host, tmp_path):
    before = invocation(host)
    # Another executable given with -e is not what the host runs: the experiment would end by loading
    # it, so the skeleton refuses first, naming both executables.
    play, _ = experiment(tmp_path, "-e", "vllm_executable=/bin/false")
    assert play.rc != 0
    message = play.result("Refuse a host that runs settings the inventory does not say")["msg"]
    assert "the server's command: the host runs /opt/vllm-standin/bin/vllm, the inventory /bin/false" in message
    assert "Nothing was stopped." in message
    # The host's own vLLM without a working `vllm bench serve` (the stand-in's fault switch).
    host.check_output(f"touch {FAULT_DIR}/bench-fails")
    play, _ = experiment(tmp_path)
    assert play.rc != 0
    message = play.result("Check that vLLM's benchmark is there")["msg"]
    assert message.startswith("/opt/vllm-standin/bin/vllm on vllm-mol-experiment has no working "
                              "`vllm bench serve` (exit 1")
    assert invocation(host) == before and not host.file(LOCK).exists


def start_experiment(tmp_path, variants):
    """experiment.yml in the background, its output in tmp_path. Its tests need a job that holds the
    lock with a variant applied, not figures: one run per server instead of the inventory's four."""
    extra = {"vllm_job_artifacts_dir": str(tmp_path / "artifacts"), "vllm_experiment_variants": variants,
             "vllm_experiment_bench_load": {"concurrencies": [4], "repeats": 1}}
    return start_playbook("experiment.yml", "-e", json.dumps(extra), log=tmp_path / "experiment.log")


def test_a_campaign_during_an_experiment_fails_at_once(host, tmp_path):
    first = start_experiment(tmp_path, [{"name": "NCCL_PROTO=Simple", "environment": {"NCCL_PROTO": "Simple"}}])
    try:
        wait_for(lambda: host.file(DROPIN).exists, "the variant to be applied", timeout_s=180)
        lock = json.loads(host.file(LOCK).content_string)
        play = run_playbook("profile.yml", "-e", json.dumps({"vllm_job_artifacts_dir": str(tmp_path / "c")}))
        assert play.rc != 0
        message = play.result("Take the host's job lock")["msg"]
        assert f"Another job holds {LOCK}: experiment {lock['job_id']}, started {lock['started_at']}" in message
        second = run_playbook("experiment.yml", "-e", json.dumps({
            "vllm_job_artifacts_dir": str(tmp_path / "e"),
            "vllm_experiment_variants": [{"name": "x", "environment": {"NCCL_PROTO": "LL128"}}]}))
        assert second.rc != 0 and "Take the host's job lock" in second.output
    finally:
        rc = first.wait(timeout_s=900)
    assert rc == 0, first.output[-4000:]


def test_an_interrupted_experiment_is_restored_by_restore_yml(host, tmp_path):
    first = start_experiment(tmp_path, [{"name": "NCCL_PROTO=Simple", "environment": {"NCCL_PROTO": "Simple"}}])
    try:
        wait_for(lambda: host.file(DROPIN).exists, "the variant to be applied", timeout_s=180)
    finally:
        first.kill()
    play = run_playbook("playbooks/restore.yml")
    assert play.rc == 0, play.output[-4000:]
    assert_normal_service(host)
    assert not host.file(VARIANT_ENV).exists
    main_pid = host.check_output(f"systemctl show {UNIT} -p MainPID --value")
    assert "NCCL_PROTO=LL\x00" in host.file(f"/proc/{main_pid}/environ").content_string
    again = run_playbook("playbooks/restore.yml")
    assert again.rc == 0 and again.changed == 0, again.changed_tasks
