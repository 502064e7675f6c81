"""tune.yml on the sandbox with the vLLM stand-in (molecule/resources/standin/README.md).

A communication-bound host: the stand-in's all-reduce model through its knob file, 10 ms of
all-reduce per 15 ms decode step, NCCL_PROTO=LL128 halving it, Simple at 0.9, 8 channels at 1.6
(the unit runs LL with 16). The floor's double follows the same factors, so the pre-screen must
keep LL128 x {8, 16} and Simple x 16, the budget of two loads must go to the two LL128 ones, and the
planted best (LL128 with 16 channels) must win the benchmark. The default host (the real H200
traces) is host-bound: its plan is host-side and has no NCCL sweep. Expected figures are computed
here, from the factors and from the fetched files; no assertion is on a duration.
"""

from __future__ import annotations

import json
import re
import shlex
import statistics
from pathlib import Path

import pytest
import yaml

from testlib import (
    FAULT_DIR,
    INCIDENTS,
    LOCK,
    ROOT,
    UNIT,
    assert_normal_service,
    run_playbook,
    standin_load_s,
    start_playbook,
    wait_for,
)

KNOBS = "/etc/vllm-standin.env"
DROPIN = f"/etc/systemd/system/{UNIT}.service.d/50-variant.conf"
FACTORS = {("NCCL_PROTO", "LL128"): 0.5, ("NCCL_PROTO", "Simple"): 0.9, ("NCCL_MAX_NCHANNELS", "8"): 1.6}
UNIT_ENV = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL", "NCCL_MAX_NCHANNELS": "16"}
# The stand-in's load on this scenario's host (its host_vars), in the unit's environment beside UNIT_ENV.
LOAD_S = standin_load_s(Path(__file__).parent)
NCCL = "nccl:NCCL_PROTO={},NCCL_MAX_NCHANNELS={}"
SWEEP = [NCCL.format(p, n) for p in ("LL", "LL128", "Simple") for n in (8, 16)]


def factor(env: dict) -> float:
    f = 1.0
    for (var, value), x in FACTORS.items():
        f *= x if env.get(var) == value else 1.0
    return f


def restart_service(host):
    host.check_output(f"systemctl restart {UNIT}")
    wait_for(lambda: host.run("curl -sf -o /dev/null http://127.0.0.1:8000/health").rc == 0, "the service's health",
             timeout_s=120)


def tune(artifacts, *args, env=None):
    return run_playbook("tune.yml", "-e", json.dumps({"vllm_job_artifacts_dir": str(artifacts)}), *args, env=env)


def only_dir(artifacts, host):
    dirs = [p for p in (artifacts / host.backend.hostname).iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def test_a_variant_that_fails_to_load_is_recorded_the_next_one_tried_and_the_winner_applied(host, tmp_path):
    plan = tmp_path / "plan.yml"
    plan_variants = {
        "draft-missing": ["--speculative-config", json.dumps(
            {"method": "draft_model", "model": "/srv/models/no-such-draft", "num_speculative_tokens": 4})],
        "ngram": ["--speculative-config", json.dumps(
            {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1})]}
    plan.write_text(yaml.safe_dump({"variants": [{"name": n, "extra_args": a} for n, a in plan_variants.items()]}))
    artifacts = tmp_path / "artifacts"
    play = tune(artifacts, "-e", f"vllm_tune_plan_file={plan}", "-e", "vllm_tune_apply=true")
    assert play.rc == 0, play.output[-5000:]
    d = only_dir(artifacts, host)
    record = json.loads((d / "tune.json").read_text())
    assert record["profile_path"] == "none"  # a plan file: no profile
    # the failed load, ngram's, and ngram deployed as the normal service (vllm_tune_apply): the stand-in's
    # n-gram speculation is a clear win
    assert [(x["what"], x["name"], x["status"]) for x in record["loads"]] == [
        ("variant", "draft-missing", "failed"), ("variant", "ngram", "ok"), ("apply", "ngram", "ok")]
    assert record["applied"] == "ngram"
    # ngram's benchmark is the known-good window the host's watch was asked to fit its baseline on (the sandbox's
    # benchmark is seconds long: whether it had enough traffic to fit on is the watch's to say)
    ngram_runs = [r for r in json.loads((d / "experiment" / "experiment.json").read_text())["runs"]
                  if r["variant"] == "ngram"]
    assert ngram_runs

    def asked():
        state = json.loads(host.file(f"{INCIDENTS}/watch-state.json").content_string)
        request = state.get("baseline_request") or {}
        return request if request.get("by") == f"tune {record['id']}'s benchmark of ngram" else None

    wait_for(asked, "the watch's answer to the tune's baseline request", timeout_s=60)
    request = asked()
    assert request["said"] and request["to"] - request["from"] > 0, request
    exp = json.loads((d / "experiment" / "experiment.json").read_text())
    failed = next(v for v in exp["variants"] if v["name"] == "draft-missing")
    assert failed["status"] == "failed" and failed["failure"]["stage"] == "load"
    assert any("Incorrect path_or_model_id" in line for line in failed["failure"]["journal"])
    report = json.loads((d / "report.json").read_text())
    assert report["costs"]["model_loads"] == 3  # the failed load, ngram's, ngram deployed (no restore load)
    # the old settings were not up again: the baseline was measured once, and the report says why
    assert report["drift"]["measured"] is False and "the winner was deployed" in report["drift"]["words"]
    assert any(w.startswith("draft-missing failed to load") for w in report["warnings"])
    assert any(w.startswith("ngram: speculative decoding was measured on random tokens") for w in report["warnings"])
    assert report["load_words"].startswith("random tokens, 32 in and 16 out, temperature 0,")
    # The winner is the normal service (no drop-in) and, healthy, the host's last-known-good: restore.yml
    # keeps it. host_vars.yml describes it exactly: with the file deploy.yml has nothing to change;
    # without it, deploy.yml puts the inventory's settings back.
    assert_normal_service(host)
    pid = host.check_output(f"systemctl show {UNIT} -p MainPID --value")
    assert '"method": "ngram"' in host.file(f"/proc/{pid}/cmdline").content_string.replace("\x00", " ")
    kept = run_playbook("playbooks/restore.yml")
    assert kept.rc == 0 and kept.changed == 0, kept.changed_tasks
    kept = run_playbook("playbooks/deploy.yml", "-e", f"@{d / 'host_vars.yml'}")
    assert kept.rc == 0 and kept.changed == 0, kept.changed_tasks
    # Until the winner is in the inventory, a job that ends on the inventory's service is refused before
    # anything stops, naming the winner's arguments and the two ways out; with it, nothing differs.
    refused = run_playbook("profile.yml")
    assert refused.rc != 0
    assert "only the host's passes --speculative-config" in refused.output, refused.output[-3000:]
    assert "playbooks/restore.yml, then playbooks/deploy.yml" in refused.output
    assert host.check_output(f"systemctl show {UNIT} -p MainPID --value") == pid
    planned = run_playbook("profile.yml", "--check", "-e", f"@{d / 'host_vars.yml'}")
    assert planned.rc == 0, planned.output[-3000:]
    # For the fleet, the winner as rollout.yml's change: ngram's own arguments, laid over each host's.
    change = yaml.safe_load((d / "rollout_change.yml").read_text())["vllm_rollout_change"]
    assert change == {"name": "ngram", "environment": {}, "extra_args": plan_variants["ngram"]}
    back = run_playbook("playbooks/deploy.yml")
    assert back.rc == 0 and back.changed > 0
    assert "speculative" not in host.file(f"/proc/{host.check_output(f'systemctl show {UNIT} -p MainPID --value')}"
                                          "/cmdline").content_string


def test_a_winner_that_does_not_load_when_applied_leaves_the_host_on_its_old_service_and_says_so(host, tmp_path):
    """The winner (ngram, a clear win on the stand-in) loads as a variant, then dies loading as the
    normal service (the switch lets one start go by): the vllm role rolls the host back to its
    last-known-good, and the tune fails saying so, its report kept."""
    plan = tmp_path / "plan.yml"
    ngram = ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": 3,
                                                 "prompt_lookup_max": 3, "prompt_lookup_min": 1})]
    plan.write_text(yaml.safe_dump({"variants": [{"name": "ngram", "extra_args": ngram}]}))
    switch = f"{FAULT_DIR}/engine-dies-during-load"
    host.check_output(f"echo 'after 1' > {switch} && chown vllm {switch}")
    before = host.check_output(f"systemctl cat {UNIT}")
    artifacts = tmp_path / "artifacts"
    play = tune(artifacts, "-e", f"vllm_tune_plan_file={plan}", "-e", "vllm_tune_apply=true")
    assert play.rc != 0, play.output[-4000:]
    assert not host.file(switch).exists, "the switch fired: the winner's deployment died loading"
    d = only_dir(artifacts, host)
    record = json.loads((d / "tune.json").read_text())
    assert record["applied"] is None and record["error"]
    assert [(x["what"], x["name"], x["status"]) for x in record["loads"]] == [("variant", "ngram", "ok")]
    report = json.loads((d / "report.json").read_text())
    assert report["winner"]["name"] == "ngram" and report["applied"] is None
    # the variant's load, the winner's that died, the last-known-good's (the rollback): job.json has all three
    assert report["costs"]["model_loads"] == 3
    assert report["drift"]["measured"] is False and "the tune stopped early" in report["drift"]["words"]
    # The message: the tune failed on this host, which is back on its normal service and healthy.
    name = host.backend.hostname
    said = play.result("Fail with the job's original error, now that the host is restored")["msg"]
    assert said.startswith(f"Tune {d.name} failed on {name} (the normal service is back and healthy"), said
    assert f"The change did not load on {name}; rolled back: {name} is back on its last-known-good" in said
    assert "stand-in fault engine-dies-during-load" in said  # what failed, from the journal
    # The host runs its old settings again, from the same unit, healthy, no speculation.
    assert_normal_service(host)
    assert host.check_output(f"systemctl cat {UNIT}") == before
    pid = host.check_output(f"systemctl show {UNIT} -p MainPID --value")
    assert "speculative" not in host.file(f"/proc/{pid}/cmdline").content_string


def start_tune(artifacts):
    """tune.yml in the background, its output beside its artifacts."""
    artifacts.mkdir(parents=True, exist_ok=True)
    return start_playbook("tune.yml", "-e", json.dumps({"vllm_job_artifacts_dir": str(artifacts)}),
                          log=artifacts.parent / "tune.log")


def test_a_host_bound_tune_plans_host_side_changes_and_an_interrupted_one_is_restored(host, tmp_path):
    artifacts = tmp_path / "artifacts"
    first = start_tune(artifacts)
    try:
        wait_for(lambda: 'Variant "cuda-graphs"' in (host.file(DROPIN).content_string if host.file(DROPIN).exists
                                                     else ""), "the host-side variant to be applied", timeout_s=300)
    finally:
        first.kill()
    # Restored first, so that a failed assertion on the plan below leaves the next tests a normal host.
    play = run_playbook("playbooks/restore.yml")
    assert play.rc == 0, play.output[-4000:]
    assert_normal_service(host)
    again = run_playbook("playbooks/restore.yml")
    assert again.rc == 0 and again.changed == 0, again.changed_tasks
    d = only_dir(artifacts, host)
    plan = json.loads((d / "plan.json").read_text())
    assert plan["origin"]["verdict"].startswith("host-bound on rank 1")
    assert [c["name"] for c in plan["candidates"]] == ["cuda-graphs"] and plan["prescreen"] == []
    assert plan["candidates"][0]["extra_args"] == ["--no-enforce-eager"]
    # graphs first (both hosts of the H200 pair are slower than their GPUs need), then rank 1's host,
    # which alone reaches rank 0's host pace at best: that one is no server variant, so left to the user
    assert plan["manual"] and plan["manual"][0].startswith("then find what slows rank 1's host")
    assert "15.2 ms a step at best" in plan["manual"][0]
    assert not (d / "allreduce").exists()  # no NCCL sweep, no pre-screen


# The communication-bound host last: the module's fixture keeps its knob file until the module ends.
@pytest.fixture(scope="module")
def comm_bound(host, tmp_path_factory):
    """The communication-bound host, and one tune of it (shared by the tests that read it)."""
    # the knob file docs/tune.md gives; its factors are FACTORS above, which the test keeps apart
    knobs = (ROOT / "examples" / "tune" / "sandbox-nccl.env").read_text()
    assert "VLLM_STANDIN_ALLREDUCE_MS=10" in knobs and "NCCL_PROTO=LL128:0.5" in knobs
    host.check_output(f"printf '%s' {shlex.quote(knobs)} > {KNOBS} && chmod 0644 {KNOBS}")
    restart_service(host)
    artifacts = tmp_path_factory.mktemp("tune") / "artifacts"
    try:
        play = tune(artifacts)
        yield play, artifacts
    finally:
        host.run(f"rm -f {KNOBS}")
        restart_service(host)


def test_a_communication_bound_host_is_tuned_at_two_loads_to_the_planted_best(host, comm_bound):
    play, artifacts = comm_bound
    assert play.rc == 0, play.output[-5000:]
    d = only_dir(artifacts, host)
    plan = json.loads((d / "plan.json").read_text())
    assert plan["origin"]["verdict"].startswith("communication-bound")
    assert [c["name"] for c in plan["candidates"]] == [*SWEEP, "ngram"] and plan["prescreen"] == SWEEP

    # The pre-screen: each candidate's floor against the unit's, the factors' ratio, here.
    pre = json.loads((d / "prescreen.json").read_text())
    unit = json.loads((d / "allreduce" / "allreduce-unit.json").read_text())
    assert unit["environment"] == UNIT_ENV
    by = {s["name"]: s for s in pre["screened"]}
    for name in SWEEP:
        env = {**UNIT_ENV, **next(c["environment"] for c in plan["candidates"] if c["name"] == name)}
        ratio = factor(env) / factor(UNIT_ENV)
        assert by[name]["ratio"] == pytest.approx(ratio, abs=1e-3), name
        # the double's loops spread from 0.98 to about 1.02 of the median: kept only below 0.98 / 1.02
        assert (by[name]["state"] == "kept") == (ratio * 1.016 < 0.98), (name, by[name])
    kept = [n for n in SWEEP if by[n]["state"] == "kept"]
    assert sorted(kept) == sorted([NCCL.format("LL128", 8), NCCL.format("LL128", 16), NCCL.format("Simple", 16)])

    # Two loads, best first: the largest expected saving (1 - ratio) x the trace's transfer.
    record = json.loads((d / "tune.json").read_text())
    variant_loads = [x["name"] for x in record["loads"] if x["what"] == "variant"]
    assert variant_loads == [NCCL.format("LL128", 16), NCCL.format("LL128", 8)]
    assert [x["what"] for x in record["loads"]] == ["profile", "variant", "variant"]
    assert {n["name"] for n in pre["not_loaded"]} == {NCCL.format("Simple", 16), "ngram"}

    # The winner, its change and band from the fetched benchmark files, as the experiment's rule has it.
    exp = json.loads((d / "experiment" / "experiment.json").read_text())

    def tpot(variant):
        return [json.loads((d / "experiment" / r["file"]).read_text())["median_tpot_ms"] for r in exp["runs"]
                if r["variant"] == variant and r["concurrency"] == 1]

    base, best = tpot("baseline"), tpot(NCCL.format("LL128", 16))
    cb, cv = statistics.median(base), statistics.median(best)
    band = max((max(abs(b - cb) for b in base) + max(abs(v - cv) for v in best)) / cb, 0.05)
    assert cv / cb - 1 < -band, "the planted best must win beyond the noise"
    report = json.loads((d / "report.json").read_text())
    assert report["winner"]["name"] == NCCL.format("LL128", 16)
    said = re.match(r"tested: `NCCL_PROTO=LL128 VLLM_ALLREDUCE_USE_FLASHINFER=0` TPOT ([-+]\d+\.\d)% "
                    r"\(\+/-(\d+\.\d)%\) at concurrency 1, expected (-\d+\.\d) ms, measured (-\d+\.\d) ms$",
                    report["result"])
    assert said, report["result"]
    assert float(said.group(1)) == pytest.approx(100 * (cv / cb - 1), abs=0.051)
    assert float(said.group(2)) == pytest.approx(100 * band, abs=0.051)
    transfer = plan["origin"]["transfer_ms"]
    assert float(said.group(3)) == pytest.approx(-(1 - by[NCCL.format("LL128", 16)]["ratio"]) * transfer, abs=0.051)
    assert float(said.group(4)) == pytest.approx(cv - cb, abs=0.051)

    # The host_vars file: the unit's settings with the winner's changes laid over them.
    host_vars = yaml.safe_load((d / "host_vars.yml").read_text())
    assert {k: str(v) for k, v in host_vars["vllm_environment"].items()} == {
        **UNIT_ENV, "VLLM_STANDIN_LOAD_S": f"{LOAD_S:g}", "NCCL_PROTO": "LL128", "VLLM_ALLREDUCE_USE_FLASHINFER": "0"}
    assert host_vars["vllm_extra_args"][0] == "--trust-remote-code"

    # Costs: the profile, two variants and the normal service back, each a gap in /health.
    job = json.loads((d / "job.json").read_text())
    assert report["costs"]["model_loads"] == 4 and job["downtime"]["gaps"] == 4
    # The baseline measured again once the normal service was back (the restore loaded it anyway):
    # both rounds in the record, their drift judged and said.
    assert {r["round"] for r in exp["runs"] if r["variant"] == "baseline"} == {1, 2}
    assert report["drift"]["measured"] is True and report["drift"]["words"]
    assert not host.file(f"/var/lib/vllm-ops/tunes/{d.name}").exists, "the results left on the host"
    headline = play.result("Print the headline")["msg"]
    assert headline.startswith(f"{host.backend.hostname}: {report['result']}; "
                               + (f"{report['drift']['drifted']}; " if report["drift"]["drifted"] else "")
                               + "6 pre-screened, 3 kept (")
    assert "; cost 4 model load(s), downtime " in headline and headline.endswith(f"-> {d / 'report.md'}")
    rows = (artifacts / host.backend.hostname / "tunes.csv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].startswith(f"{d.name},")

    # The host is back on its normal service: restore.yml has nothing to change.
    assert_normal_service(host)
    again = run_playbook("playbooks/restore.yml")
    assert again.rc == 0 and again.changed == 0, again.changed_tasks


def test_check_mode_prints_the_plan_and_its_minutes_and_refuses_one_over_the_budget(host, comm_bound, tmp_path):
    _, artifacts = comm_bound
    before = host.check_output(f"systemctl show {UNIT} -p InvocationID --value")
    check = tune(artifacts, "--check")
    assert check.rc == 0, check.output[-4000:]
    d = only_dir(artifacts, host)  # the check made no tune directory of its own
    # The host's last measured load: the median time to ready of the loads the tune's job.json recorded.
    ready = [x["total_s"] for x in json.loads((d / "job.json").read_text())["loads"] if x["ready"]]
    s = round(statistics.median(ready), 1)
    said = check.result("Say the plan and its cost")["msg"]
    assert "7 candidate(s), 6 pre-screened first" in said
    assert (f"cost 3-4 model load(s) (1 profile, 1-2 variant(s), 1 back to the normal service), about "
            f"{3 * s / 60:.1f}-{4 * s / 60:.1f} min of downtime at {s:.0f} s a load (the {len(ready)} load(s) of "
            f"tune {d.name})") in said
    assert not host.file(LOCK).exists  # check mode took no lock (its "changed" are what a run would change)

    plan = tmp_path / "plan.yml"
    plan.write_text(yaml.safe_dump({"variants": [{"name": n, "extra_args": [f"--{n}"]}
                                                 for n in ("async-scheduling", "no-enforce-eager", "enforce-eager")]}))
    over = tune(artifacts, "--check", "-e", f"vllm_tune_plan_file={plan}")
    assert over.rc != 0
    msg = over.result("Refuse a plan over the budget, with its cost")["msg"]
    assert msg.startswith(f"{host.backend.hostname}: the plan needs at least 3 variant load(s) (async-scheduling, "
                          "no-enforce-eager, enforce-eager: no floor can pre-screen them) and vllm_tune_max_loads is 2")
    assert "cost 4-4 model load(s)" not in msg and "cost 4 model load(s) (0 profile, 3-3 variant(s)" in msg
    assert host.check_output(f"systemctl show {UNIT} -p InvocationID --value") == before
