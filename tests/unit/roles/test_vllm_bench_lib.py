"""The experiment's benchmark helpers on the host: /metrics counters and the bench command line."""

from __future__ import annotations

import itertools

from ansible_collections.vllm_ops.serving.plugins.module_utils import vllm_bench_lib as bench

# As vLLM 0.32 writes them (read from its CPU build), with a speculating server's counters.
METRICS = """\
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="tiny-llama"} 2.0
vllm:num_preemptions_created{engine="0",model_name="tiny-llama"} 1.7961341266811736e+09
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny-llama"} 1.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny-llama"} 8.0
vllm:spec_decode_num_drafts_total{engine="0",model_name="a {b} c"} 30.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="tiny-llama"} 90.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny-llama"} 60.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="tiny-llama",position="0"} 25.0
vllm:generation_tokens_total{engine="0",model_name="tiny-llama"} 128.0
vllm:request_prompt_tokens_bucket{engine="0",le="1.0",model_name="tiny-llama"} 0.0
vllm:request_prompt_tokens_bucket{engine="0",le="100.0",model_name="tiny-llama"} 3.0
vllm:request_prompt_tokens_bucket{engine="0",le="+Inf",model_name="tiny-llama"} 9.0
vllm:request_prompt_tokens_bucket{engine="1",le="100.0",model_name="tiny-llama"} 1.0
vllm:request_prompt_tokens_bucket{engine="1",le="+Inf",model_name="tiny-llama"} 2.0
vllm:request_prompt_tokens_count{engine="0",model_name="tiny-llama"} 9.0
vllm:request_generation_tokens_bucket{le="10.0",engine="0",model_name="tiny-llama"} 4.0
"""


def test_counters_are_summed_over_their_label_sets():
    assert bench.counters(METRICS) == {
        "num_preemptions_total": 2.0,
        "request_success_total": 9.0,  # stop + length
        "spec_decode_num_drafts_total": 30.0,  # a label value with braces and spaces
        "spec_decode_num_draft_tokens_total": 90.0,
        "spec_decode_num_accepted_tokens_total": 60.0,  # not the per-position counter
        "generation_tokens_total": 128.0,
    }


def test_a_server_without_speculation_has_no_spec_decode_counters():
    plain = "\n".join(line for line in METRICS.splitlines() if "spec_decode" not in line)
    assert set(bench.counters(plain)) == {"num_preemptions_total", "request_success_total",
                                          "generation_tokens_total"}


def test_the_request_length_histograms_are_summed_over_label_sets_by_bucket():
    assert bench.buckets(METRICS) == {
        "request_prompt_tokens": {"1.0": 0.0, "100.0": 4.0, "+Inf": 11.0},  # engines 0 and 1
        "request_generation_tokens": {"10.0": 4.0},  # le before the other labels
    }
    before = {"request_success_total": 1.0, "histograms": {"request_prompt_tokens": {"100.0": 1.0, "+Inf": 2.0}}}
    after = {"request_success_total": 3.0, "histograms": {"request_prompt_tokens": {"100.0": 4.0, "+Inf": 11.0}}}
    assert bench.deltas(before, after) == {"request_success_total": 2.0,
                                           "histograms": {"request_prompt_tokens": {"100.0": 3.0, "+Inf": 9.0}}}


def test_deltas_over_a_run_and_a_counter_reset():
    before = {"request_success_total": 9.0, "num_preemptions_total": 2.0}
    after = {"request_success_total": 17.0, "num_preemptions_total": 1.0, "spec_decode_num_drafts_total": 4.0}
    # A counter lower than before was reset (a restart): its new value is what the run counted.
    assert bench.deltas(before, after) == {"request_success_total": 8.0, "num_preemptions_total": 1.0,
                                          "spec_decode_num_drafts_total": 4.0}


def test_the_bench_command_is_vllms_with_a_fixed_load():
    argv = bench.bench_argv({
        "executable": "/opt/vllm/venv/bin/vllm", "base_url": "http://127.0.0.1:8000", "model": "kimi-k2.5",
        "tokenizer": "/models/k", "input_len": 1024, "output_len": 256, "num_prompts": 64, "concurrency": 8,
        "warmups": 4, "seed": 0, "result_dir": "/var/lib/x/01", "result_filename": "c8-r1.json",
        "extra_args": ["--temperature", 0]})
    assert argv[:3] == ["/opt/vllm/venv/bin/vllm", "bench", "serve"]
    flags = dict(itertools.pairwise(argv[3:]))
    assert flags["--max-concurrency"] == "8" and flags["--num-prompts"] == "64"
    assert flags["--request-rate"] == "inf" and flags["--dataset-name"] == "random"
    assert flags["--random-input-len"] == "1024" and flags["--random-output-len"] == "256"
    assert "--ignore-eos" in argv and "--save-result" in argv
    assert argv[-2:] == ["--temperature", "0"]


_POINT = {"executable": "vllm", "base_url": "http://127.0.0.1:8000", "model": "m", "tokenizer": "/t",
          "input_len": 32, "output_len": 16, "num_prompts": 8, "concurrency": 1, "warmups": 1, "seed": 3,
          "result_dir": "/r", "result_filename": "c1-r1.json"}


def test_the_temperature_is_pinned_to_greedy_unless_given():
    flags = dict(itertools.pairwise(bench.bench_argv(_POINT)))
    assert flags["--temperature"] == "0"
    assert dict(itertools.pairwise(bench.bench_argv({**_POINT, "temperature": 0.7})))["--temperature"] == "0.7"
    assert "--temperature" not in bench.bench_argv({**_POINT, "temperature": None})


def test_a_prompts_file_is_vllms_custom_dataset_with_the_output_length_fixed():
    argv = bench.bench_argv({**_POINT, "dataset_path": "/var/lib/x/prompts.jsonl"})
    flags = dict(itertools.pairwise(argv))
    assert flags["--dataset-name"] == "custom" and flags["--dataset-path"] == "/var/lib/x/prompts.jsonl"
    assert flags["--custom-output-len"] == "16" and "--ignore-eos" in argv
    assert "--random-input-len" not in argv and "--random-output-len" not in argv


def test_a_replay_is_vllms_timed_trace_at_the_recordings_own_times():
    argv = bench.bench_argv({**_POINT, "concurrency": 0, "warmups": 0, "num_prompts": 12,
                             "traffic_path": "/var/lib/x/replay.jsonl", "traffic_block": 64, "traffic_speed": 2.0})
    flags = dict(itertools.pairwise(argv))
    assert flags["--dataset-name"] == "timed_trace" and flags["--dataset-path"] == "/var/lib/x/replay.jsonl"
    # the recording's block a chunk (not vLLM's default 16); milliseconds at twice the recorded pace
    assert flags["--timed-trace-chunk-hash-size"] == "64"
    assert float(flags["--timed-trace-sec-multiplier"]) == 0.001 / 2
    assert flags["--num-prompts"] == "12" and flags["--num-warmups"] == "0"
    # the arrivals are the recording's: no cap of requests in flight, no rate of the benchmark's own
    assert "--max-concurrency" not in argv and "--request-rate" not in argv
    assert "--random-input-len" not in argv and "--custom-output-len" not in argv
