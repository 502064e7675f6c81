"""The benchmark load every job sends, in three layers (vllm_ops.experiment.load, role vllm_bench)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from vllm_ops.experiment import ExperimentInputError
from vllm_ops.experiment.load import recorded, resolve

ROOT = Path(__file__).resolve().parents[3]
ROLE_DEFAULTS = yaml.safe_load((ROOT / "roles/vllm_bench/defaults/main.yml").read_text())
# The two fields templated from their own variables, rendered as Ansible would with the role's defaults.
DEFAULTS = dict(ROLE_DEFAULTS["vllm_bench_load_defaults"], traffic=ROLE_DEFAULTS["vllm_bench_traffic"],
                traffic_speed=ROLE_DEFAULTS["vllm_bench_traffic_speed"])


def test_the_roles_defaults_are_a_whole_load_and_the_fleet_changes_nothing_by_default():
    assert ROLE_DEFAULTS["vllm_bench_load"] == {}
    assert resolve(DEFAULTS) == {
        "input_len": 1024, "output_len": 256, "concurrencies": [1, 8, 32], "num_prompts": 64, "repeats": 3,
        "warmups": 4, "seed": 0, "temperature": 0.0, "prompts_file": "", "args": [], "environment": {},
        "tokenizer": "", "timeout_s": 1800, "traffic": "", "traffic_speed": 1.0}
    templated = ROLE_DEFAULTS["vllm_bench_load_defaults"]
    assert (templated["traffic"], templated["traffic_speed"]) == ("{{ vllm_bench_traffic }}",
                                                                  "{{ vllm_bench_traffic_speed }}")


def test_a_replay_is_one_point_at_the_recordings_own_arrivals():
    load = resolve(DEFAULTS, {"concurrencies": [1, 8]}, {"traffic": "artifacts/traffic/h1", "traffic_speed": "2"},
                   "vllm_experiment_bench_load")
    assert load["concurrencies"] == [0] and load["traffic_speed"] == 2.0
    assert recorded(load)["traffic"] == "artifacts/traffic/h1"
    # the resolved load, checked again where the benchmark sends it (role vllm_bench's main), is the same
    assert resolve(DEFAULTS, load, fleet_name="vllm_bench_job_load") == load
    with pytest.raises(ExperimentInputError, match=r"vllm_experiment_bench_load.traffic and "
                                                   r"vllm_bench_load.prompts_file are both set"):
        resolve(DEFAULTS, {"prompts_file": "p.jsonl"}, {"traffic": "t"}, "vllm_experiment_bench_load")
    with pytest.raises(ExperimentInputError, match=r"vllm_bench_load.traffic_speed \(0.0\) must be above 0"):
        resolve(DEFAULTS, {"traffic": "t", "traffic_speed": 0})


def test_a_jobs_fields_over_the_fleets_over_the_defaults():
    fleet = {"concurrencies": [1, 4], "num_prompts": 8, "repeats": 2, "environment": {"HF_HUB_OFFLINE": 1}}
    job = {"repeats": 5, "args": ["--request-rate", 4]}
    load = resolve(DEFAULTS, fleet, job, "vllm_tune_bench_load")
    assert load["concurrencies"] == [1, 4] and load["num_prompts"] == 8    # the fleet's
    assert load["repeats"] == 5                                             # the job's, over the fleet's 2
    assert load["input_len"] == 1024 and load["timeout_s"] == 1800          # the defaults'
    # Values as a shell or YAML gives them, made what the benchmark reads.
    assert load["args"] == ["--request-rate", "4"] and load["environment"] == {"HF_HUB_OFFLINE": "1"}


def test_numbers_from_the_command_line_are_taken_as_numbers():
    load = resolve(DEFAULTS, {"input_len": "32", "concurrencies": ["1", "2"], "temperature": "0.7"})
    assert (load["input_len"], load["concurrencies"], load["temperature"]) == (32, [1, 2], 0.7)


@pytest.mark.parametrize(("fleet", "job", "message"), [
    ({}, {"repeats": 0}, "vllm_tune_bench_load.repeats (0) must be at least 1"),
    ({"output_len": 1}, {}, "vllm_bench_load.output_len (1) must be at least 2 (TPOT needs two tokens)"),
    ({"concurrencies": [1, 128]}, {}, "vllm_bench_load_defaults.num_prompts (64) must be at least the highest of "
                                      "vllm_bench_load.concurrencies (128)"),
    ({}, {"concurrencies": []}, "vllm_tune_bench_load.concurrencies ([]) must list positive whole numbers"),
    ({}, {"concurrencies": 4}, "vllm_tune_bench_load.concurrencies must be a list of whole numbers, not 4"),
    ({"warmups": "many"}, {}, "vllm_bench_load.warmups must be a whole number, not 'many'"),
    ({"repeats": True}, {}, "vllm_bench_load.repeats must be a whole number, not True"),
    ({}, {"temperature": -1}, "vllm_tune_bench_load.temperature (-1.0) must be at least 0"),
    ({}, {"args": "--seed 1"}, "vllm_tune_bench_load.args must be a list of arguments"),
    ({}, {"environment": ["A=1"]}, "vllm_tune_bench_load.environment must be a mapping"),
    ({}, {"concurency": [1]}, "vllm_tune_bench_load has no field concurency (did you mean concurrencies?)"),
    ([1], {}, "vllm_bench_load must be a mapping of load fields"),
])
def test_a_wrong_field_is_named_by_the_variable_it_came_from(fleet, job, message):
    with pytest.raises(ExperimentInputError) as caught:
        resolve(DEFAULTS, fleet, job, "vllm_tune_bench_load")
    assert message in str(caught.value)


def test_num_prompts_below_the_highest_concurrency_names_both_fields():
    with pytest.raises(ExperimentInputError) as caught:
        resolve(DEFAULTS, {"num_prompts": 16}, {"concurrencies": [1, 32]}, "vllm_rollout_bench_load")
    assert str(caught.value) == ("vllm_bench_load.num_prompts (16) must be at least the highest of "
                                 "vllm_rollout_bench_load.concurrencies (32), so that each point reaches its "
                                 "concurrency")


def test_defaults_that_lack_a_field_are_refused():
    partial = {k: v for k, v in DEFAULTS.items() if k != "seed"}
    with pytest.raises(ExperimentInputError, match="vllm_bench_load_defaults lacks seed"):
        resolve(partial)


def test_a_record_keeps_what_was_sent_not_where_it_ran():
    load = resolve(DEFAULTS, {"environment": {"HF_TOKEN": "secret"}, "tokenizer": "/srv/tok", "args": ["--x"]})
    assert recorded(load) == {
        "input_len": 1024, "output_len": 256, "num_prompts": 64, "concurrencies": [1, 8, 32], "repeats": 3,
        "warmups": 4, "seed": 0, "temperature": 0.0, "prompts_file": "", "bench_args": ["--x"], "traffic": "",
        "traffic_speed": 1.0}
