"""The stand-in's load, as vllm_ops_host.loads reads it: every phase a GPU host logs, the compile cache
written on the first start and read back on the next, --enforce-eager without compile or CUDA graphs,
and --load-format on the command line and in tqdm's bar. Durations are the stand-in's knobs: measured
by the parser, never asserted here."""

import re

from vllm_ops_host import loads


def stopped_load(server, *extra, env=None):
    """Start, wait for health, stop; the load record of the output (untimed: the log has no clock)."""
    start = len(server.log()) if server.log_path.exists() else 0
    server.start(*extra, tp=2, env=env)
    server.wait_ready()
    server.kill_all()
    return loads.parse_load(server.log()[start:].splitlines())


def test_every_phase_of_a_gpu_host_and_the_compile_cache(server, sandbox):
    for index in range(4):
        (sandbox.model / f"model-{index + 1:05d}-of-00004.safetensors").write_bytes(b"x" * 1000)
    first = stopped_load(server)
    assert first["ready"] and first["milestones_found"] == [m.name for m in loads.MILESTONES]
    assert first["compile"]["cache"] == "miss"
    assert first["weights"]["shards"] == 4 and first["load_format"] == "auto"
    assert first["stated"]["weights_s"] is not None and first["stated"]["graphs_s"] is not None
    assert first["kv_cache"]["device"] == "GPU" and first["kv_cache"]["tokens"] > 0
    cache = sandbox.root / "vllm-cache" / "torch_compile_cache"
    assert list(cache.rglob("vllm_compile_cache.py")), "rank 0's cache entry is written"

    second = stopped_load(server)
    assert second["compile"]["cache"] == "hit"

    off = stopped_load(server, env={"VLLM_DISABLE_COMPILE_CACHE": "1"})
    assert off["compile"]["cache"] == "disabled"


def test_enforce_eager_has_no_compile_and_no_cuda_graphs(server):
    record = stopped_load(server, "--enforce-eager")
    assert record["ready"]
    assert {"compile", "graphs"}.isdisjoint(record["milestones_found"])
    assert record["compile"]["cache"] is None


def test_the_load_format_is_on_the_command_line_and_the_runai_streamer_has_its_own_bar(server):
    record = stopped_load(server, "--load-format", "runai_streamer",
                          env={"VLLM_STANDIN_LOAD_FORMAT_FACTORS": "runai_streamer:0.5"})
    assert record["load_format"] == "runai_streamer"
    assert record["weights"]["loader"] == "Loading safetensors using Runai Model Streamer"
    assert re.search(r"non-default args: \{.*'load_format': 'runai_streamer'", server.log())
