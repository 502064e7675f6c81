"""vllm-campaign-report analyze DIR: the campaign's files in, every output out, headline last.

The directory is built here as the Ansible side leaves it: the real H200 TP-2 traces (copied), a
capture.json (numbers as strings where Ansible templates them), a job.json and a topology.txt.
Expected values come from the inputs and from the summarizer's own API, never from the command.
"""

import csv
import hashlib
import json
import shutil
import statistics
import subprocess

import pytest

from vllm_ops.campaign.cli import main
from vllm_ops.traces import DEFAULT_DECODE_PATTERN, SummaryOptions, summarize
from vllm_ops.traces.render import verdict_sentence

from campaign_helpers import BIN, CPU_TRACE, H200, REPO

PNG = b"\x89PNG\r\n\x1a\n"
PATTERN = "^decode_step$"
TTFT = [40.1, 38.2, 45.5, 41.0, 39.4]
TPOT = [16.4, 16.6, 16.5, 17.1, 16.45]
TOPOLOGY = ("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
            "GPU0\t X \tNV18\t0-47\t0\t\tN/A\n"
            "GPU1\tNV18\t X \t0-47\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n  NV#  = NVLinks\n")
DOWNTIME = {"seconds_not_ready": 1822.4, "gaps": 2, "longest_gap_s": 1801.0, "polls": 2460, "failed_polls": 1822,
            "interval_s": 1,
            "gap_list": [{"from": "2026-12-01T12:00:05Z", "to": "2026-12-01T12:30:06Z", "seconds": 1801.0,
                          "open": False},
                         {"from": "2026-12-01T12:40:00Z", "to": "2026-12-01T12:40:21Z", "seconds": 21.4,
                          "open": False}]}


def _capture(directory, traces, host="h200-a", tp="2"):
    entries = []
    for rank, name in enumerate(traces):
        data = (directory / name).read_bytes()
        entries.append({"rank": str(rank), "path": f"/var/lib/vllm/traces/{name}", "file": name,
                        "bytes": str(len(data)), "sha256": hashlib.sha256(data).hexdigest()})
    return {
        "id": "20261201T120000Z", "prefix": "20261201T120000Z", "host": host, "started_at": "2026-12-01T12:00:00Z",
        "model": "moonshotai/Kimi-K2.5", "vllm_version": "0.32.0", "tensor_parallel_size": tp, "variant": None,
        "environment": {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "HF_TOKEN": "s3cr3t"},
        "path": "restart (the profiling variant)",
        "settings": {"model_path": "/models/kimi", "gpu_memory_utilization": "0.9", "max_model_len": "32768",
                     "extra_args": ["--enforce-eager", "--max-num-seqs", "8"]},
        "profiler_config": {"profiler": "torch", "torch_profiler_dir": "/var/lib/vllm/traces",
                            "torch_profiler_use_gzip": True},
        "load": {"requests": "4", "concurrency": "1", "batch_size": "1", "prompt_tokens": "128",
                 "output_tokens": "64", "warmup_requests": "2", "stop_profile_s": "12.5"},
        "samples": {"ttft_ms": [str(TTFT[0]), *TTFT[1:]], "tpot_ms": TPOT},
        "traces": entries,
    }


def _job(capture, downtime=DOWNTIME):
    return {"id": capture["id"], "kind": "campaign", "host": capture["host"], "controller": "ctl",
            "started_at": capture["started_at"], "finished_at": "2026-12-01T12:41:07Z", "downtime": downtime,
            "error": None}


@pytest.fixture
def campaign_dir(tmp_path):
    """artifacts/h200-a/<id>/ as the campaign leaves it before the report."""
    directory = tmp_path / "artifacts" / "h200-a" / "20261201T120000Z"
    directory.mkdir(parents=True)
    names = []
    for trace in sorted(H200.glob("*.pt.trace.json.gz")):
        shutil.copy(trace, directory / trace.name)
        names.append(trace.name)
    (directory / "tp2_rank0.profiler_out_0.txt").write_text("vLLM's table\n")
    capture = _capture(directory, names)
    (directory / "capture.json").write_text(json.dumps(capture))
    (directory / "job.json").write_text(json.dumps(_job(capture)))
    (directory / "topology.txt").write_text(TOPOLOGY)
    return directory


def _stats(samples):
    q = statistics.quantiles(samples, n=100, method="inclusive")
    return {"count": len(samples), "mean": round(statistics.fmean(samples), 3), "p50": round(q[49], 3),
            "p90": round(q[89], 3), "p99": round(q[98], 3), "min": min(samples), "max": max(samples)}


def test_analyze_writes_every_output(campaign_dir, tmp_path, capsys):
    history = tmp_path / "artifacts" / "h200-a" / "history.csv"
    assert main(["analyze", str(campaign_dir), "--history", str(history), "--decode-pattern", PATTERN]) == 0
    lines = capsys.readouterr().out.splitlines()
    d = str(campaign_dir)

    # summary.json is the summarizer's own answer on the traces, with the host's context
    want = summarize(sorted(str(p) for p in campaign_dir.glob("*.pt.trace.json.gz")), SummaryOptions(
        decode_pattern=PATTERN, context={"interconnect": "nvlink", "tensor_parallel_size": 2}))
    summary = json.loads((campaign_dir / "summary.json").read_text())
    assert summary == {"schema": "vllm-ops/summary/1", **json.loads(json.dumps(want))}  # the record's file
    assert summary["context"]["interconnect"] == "nvlink" and summary["context"]["sources"]["interconnect"] == "given"

    # campaign.json: the inputs, coerced, and the statistics of the samples
    record = json.loads((campaign_dir / "campaign.json").read_text())
    capture = json.loads((campaign_dir / "capture.json").read_text())
    assert set(record) == {"id", "host", "started_at", "finished_at", "model", "vllm_version", "tensor_parallel_size",
                           "topology", "variant", "environment", "downtime", "path", "allreduce_floor", "settings",
                           "profiler_config", "load", "latency", "traces", "summary_json", "chart_png", "steps_png",
                           "report", "checkpoint", "fabric", "ledger_png", "model_loads"}
    assert (record["id"], record["host"], record["started_at"], record["finished_at"]) == (
        "20261201T120000Z", "h200-a", "2026-12-01T12:00:00Z", "2026-12-01T12:41:07Z")
    assert (record["model"], record["vllm_version"], record["tensor_parallel_size"], record["variant"]) == (
        "moonshotai/Kimi-K2.5", "0.32.0", 2, None)
    assert record["topology"] == {"interconnect": "nvlink", "gpus": 2, "links": {"GPU0-GPU1": "NV18"}}
    assert record["environment"] == capture["environment"] and record["downtime"] == DOWNTIME
    assert record["path"] == "restart (the profiling variant)" and record["allreduce_floor"] is None
    assert record["settings"] == {"model_path": "/models/kimi", "gpu_memory_utilization": 0.9,
                                  "max_model_len": 32768, "extra_args": "--enforce-eager --max-num-seqs 8"}
    assert record["profiler_config"] == capture["profiler_config"]
    assert record["load"] == {"requests": 4, "concurrency": 1, "batch_size": 1, "prompt_tokens": 128,
                              "output_tokens": 64, "warmup_requests": 2, "stop_profile_s": 12.5}
    assert record["latency"] == {"ttft_ms": _stats(TTFT), "tpot_ms": _stats(TPOT)}
    assert record["traces"] == [dict(t, rank=int(t["rank"]), bytes=int(t["bytes"])) for t in capture["traces"]]
    assert (record["summary_json"], record["chart_png"], record["steps_png"]) == ("summary.json", "decode.png",
                                                                                  "steps.png")
    assert record["report"] == f"{d}/report.md"
    # written as the playbook wrote them: keys sorted, four spaces
    assert (campaign_dir / "campaign.json").read_text().startswith('{\n    "allreduce_floor": null,\n')

    # one line per file, the headline last
    warnings = len(want["warnings"])
    headline = (f"h200-a: {verdict_sentence(want)} ({warnings} warning{'s' if warnings != 1 else ''}); "
                "downtime 1822.4 s in 2 gaps (longest 1801.0 s)")
    assert lines[:2] == [f"wrote {d}/summary.json", f"wrote {d}/campaign.json"]
    assert lines[2].startswith(f"wrote {d}/decode.png (") and lines[3].startswith(f"wrote {d}/steps.png (")
    assert lines[4:] == [f"wrote {d}/report.md", f"created {history}: campaign 20261201T120000Z",
                         f"{headline} -> {d}/report.md"]
    for png in ("decode.png", "steps.png"):
        assert (campaign_dir / png).read_bytes()[:8] == PNG

    # report.md's key lines
    text = (campaign_dir / "report.md").read_text()
    ttft = _stats(TTFT)
    for line in ("# vLLM profiling campaign `20261201T120000Z` on h200-a\n", f"\n> {headline}\n",
                 "| path | restart (the profiling variant) |", "| duration | 41 min 7 s |",
                 "| GPU interconnect (nvidia-smi topo -m) | nvlink |", "| tensor parallel size | 2 |",
                 "| max_model_len | 32768 |", "| extra_args | --enforce-eager --max-num-seqs 8 |",
                 "| `NCCL_PROTO` | LL |", "| `HF_TOKEN` | (hidden) |", "| requests | 4 |", "| stop_profile_s | 12.5 |",
                 "polls, 1822 not 200): **downtime 1822.4 s in 2 gaps (longest 1801.0 s)**.",
                 "| 2026-12-01T12:00:05Z | 2026-12-01T12:30:06Z | 1801.0 |",
                 '  "torch_profiler_use_gzip": true\n',
                 f"| TTFT (time to first token) | 5 | {ttft['mean']:.2f} | {ttft['p50']:.2f} | {ttft['p90']:.2f} | "
                 f"{ttft['p99']:.2f} | {min(TTFT):.2f} | {max(TTFT):.2f} |",
                 "## Verdict\n", "| 0 | `tp2_rank0.pt.trace.json.gz` | 768367 | `"
                 + hashlib.sha256((H200 / "tp2_rank0.pt.trace.json.gz").read_bytes()).hexdigest() + "` |"):
        assert line in text, line
    assert "s3cr3t" not in text

    # the history row
    (row,) = list(csv.DictReader(history.open()))
    assert (row["campaign_id"], row["finished_at"], row["host"], row["tensor_parallel_size"]) == (
        "20261201T120000Z", "2026-12-01T12:41:07Z", "h200-a", "2")
    assert (row["nccl_proto"], row["nccl_algo"], row["requests"], row["output_tokens"]) == ("LL", "Ring", "4", "64")
    assert row["ttft_ms_p50"] == str(ttft["p50"]) and row["tpot_ms_p50"] == str(_stats(TPOT)["p50"])
    assert (row["downtime_s"], row["longest_gap_s"], row["report"]) == ("1822.4", "1801.0", f"{d}/report.md")
    assert row["verdict"] == want["verdict"]["kind"] and row["warnings"] == str(warnings)

    # again: the files are rewritten whole, the history gets a second row
    assert main(["analyze", str(campaign_dir), "--history", str(history), "--decode-pattern", PATTERN]) == 0
    assert capsys.readouterr().out.splitlines()[5] == f"appended to {history}: campaign 20261201T120000Z"
    assert len(list(csv.DictReader(history.open()))) == 2
    assert not [p.name for p in campaign_dir.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_without_job_json_the_downtime_is_not_recorded(campaign_dir, capsys):
    (campaign_dir / "job.json").unlink()
    (campaign_dir / "topology.txt").unlink()
    assert main(["analyze", str(campaign_dir), "--decode-pattern", ""]) == 0  # empty: the summarizer's default
    lines = capsys.readouterr().out.splitlines()
    record = json.loads((campaign_dir / "campaign.json").read_text())
    assert record["downtime"] is None and record["topology"] == {"interconnect": None, "gpus": 0, "links": {}}
    assert record["finished_at"] >= "2026-01-01T00:00:00Z" and record["finished_at"].endswith("Z")
    assert "downtime" not in lines[-1] and lines[-1].endswith(f" -> {campaign_dir}/report.md")
    summary = json.loads((campaign_dir / "summary.json").read_text())
    assert summary["decode_pattern"] == DEFAULT_DECODE_PATTERN  # the traces' decode_step is not vLLM's name
    text = (campaign_dir / "report.md").read_text()
    assert "## Downtime\n\nNot recorded.\n" in text
    assert "| GPU interconnect (nvidia-smi topo -m) | not recorded |" in text


def _floor(world=2):
    return {"tool": "allreduce_bench", "schema": 1, "world_size": world, "backend": "nccl", "gpu_name": "NVIDIA H200",
            "sizes": [{"bytes": 1024, "median_us": 5.0}, {"bytes": 16384, "median_us": 8.0}]}


def test_the_newest_floor_under_the_hosts_artifacts(campaign_dir, capsys):
    host = campaign_dir.parent
    older = host / "20261130T090000Z" / "allreduce" / "allreduce-unit.json"
    newer = host / "20261201T080000Z" / "allreduce" / "allreduce-unit.json"
    too_deep = host / "20261231T000000Z" / "a" / "b" / "allreduce-unit.json"  # 4 levels below: not looked at
    for path in (older, newer, too_deep):
        path.parent.mkdir(parents=True)
        path.write_text(json.dumps(_floor()))
    (host / "20261201T080000Z" / "allreduce" / "allreduce-LL128.json").write_text(json.dumps(_floor()))
    assert main(["analyze", str(campaign_dir), "--decode-pattern", PATTERN, "--floors-under", str(host)]) == 0
    record = json.loads((campaign_dir / "campaign.json").read_text())
    summary = json.loads((campaign_dir / "summary.json").read_text())
    assert record["allreduce_floor"] == str(newer) == summary["allreduce_floor"]["source"]
    (group,) = summary["collectives"]["groups"]
    assert group["floor_us"] is not None and group["floor_how"] == "interpolated"
    # given, it wins; none under an empty directory
    assert main(["analyze", str(campaign_dir), "--decode-pattern", PATTERN, "--allreduce-floor", str(older)]) == 0
    assert json.loads((campaign_dir / "campaign.json").read_text())["allreduce_floor"] == str(older)
    empty = host.parent / "none"
    empty.mkdir()
    assert main(["analyze", str(campaign_dir), "--decode-pattern", PATTERN, "--floors-under", str(empty)]) == 0
    assert json.loads((campaign_dir / "campaign.json").read_text())["allreduce_floor"] is None
    capsys.readouterr()


def test_a_cpu_campaign(tmp_path, capsys):
    """A trace without GPU kernels (vLLM's CPU backend): null figures, the headline says so."""
    directory = tmp_path / "vllm-cpu" / "c1"
    directory.mkdir(parents=True)
    shutil.copy(CPU_TRACE, directory / CPU_TRACE.name)
    capture = _capture(directory, [CPU_TRACE.name], host="vllm-cpu", tp="1")
    (directory / "capture.json").write_text(json.dumps(capture))
    (directory / "job.json").write_text(json.dumps(_job(capture, downtime=None)))
    (directory / "topology.txt").write_text("")
    assert main(["analyze", str(directory)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"vllm-cpu: no GPU kernels in the traces: all-reduce share not measured (15 decode steps; 1 warning) "
        f"-> {directory}/report.md")
    text = (directory / "summary.json").read_text()
    written = json.loads(text)
    assert written["ranks"][0]["cuda_ms_per_step"] is None and written["allreduce"]["share_mean"] is None
    assert '"cuda_ms_per_step": null' in text
    assert not written["gpu_time_measured"] and written["ranks"][0]["decode_steps"] == 15


def _error(capsys):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("vllm-campaign-report: error: "), err
    return err


@pytest.mark.parametrize(("change", "message"), [
    (lambda c: c.update(tensor_parallel_size="eight"), "capture.json: 'tensor_parallel_size' must be an integer >= 1, "
                                                       "got 'eight'; correct it"),
    (lambda c: c["load"].update(requests=None), "'load.requests' must be an integer >= 1, got None"),
    (lambda c: c["samples"].update(ttft_ms=[1.0, "slow"]), "'samples.ttft_ms[1]' must be a number >= 0, got 'slow'"),
    (lambda c: c["samples"].update(tpot_ms="16"), "'samples.tpot_ms' must be a list of milliseconds, got str"),
    (lambda c: c.update(started_at="yesterday"), "'started_at' is no time"),
    (lambda c: c.pop("host"), "'host' must be a non-empty string, got None"),
    (lambda c: c["settings"].update(extra_args=7), "'settings.extra_args' must be a string or a list of strings"),
    (lambda c: c.update(path="sideways"), "'path' must say 'live (...)' or 'restart (...)'"),
    (lambda c: c["traces"][1].update(rank="0"), "'traces' names a rank twice: [0, 0]"),
    (lambda c: c["traces"][1].update(file="tp2_rank9.pt.trace.json.gz"),
     "tp2_rank9.pt.trace.json.gz: rank 1's trace, listed in capture.json, is missing; fetch the traces again"),
])
def test_bad_capture_exits_2_naming_the_field(campaign_dir, capsys, change, message):
    capture = json.loads((campaign_dir / "capture.json").read_text())
    change(capture)
    (campaign_dir / "capture.json").write_text(json.dumps(capture))
    assert main(["analyze", str(campaign_dir)]) == 2
    assert message in _error(capsys)
    assert not (campaign_dir / "summary.json").exists() and not (campaign_dir / "report.md").exists()


def test_other_bad_inputs_exit_2(campaign_dir, tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "nowhere")]) == 2
    assert "nowhere: no such directory; give the campaign's directory" in _error(capsys)
    job = json.loads((campaign_dir / "job.json").read_text())
    (campaign_dir / "job.json").write_text(json.dumps(dict(job, id="20261130T000000Z")))
    assert main(["analyze", str(campaign_dir)]) == 2
    assert "job.json: 'id' is '20261130T000000Z', capture.json's is '20261201T120000Z'" in _error(capsys)
    (campaign_dir / "job.json").write_text(json.dumps(dict(job, downtime={"gaps": "x"})))
    assert main(["analyze", str(campaign_dir), "--decode-pattern", PATTERN]) == 2
    assert "a downtime record needs seconds_not_ready and gaps" in _error(capsys)
    (campaign_dir / "job.json").write_text(json.dumps(job))
    (tmp_path / "floor.json").write_text('{"tool": "other"}')
    assert main(["analyze", str(campaign_dir), "--allreduce-floor", str(tmp_path / "floor.json")]) == 2
    assert "not an all-reduce floor" in _error(capsys)
    assert main(["analyze", str(campaign_dir), "--decode-pattern", "("]) == 2
    assert "decode_pattern: invalid regular expression" in _error(capsys)
    (campaign_dir / "capture.json").unlink()
    assert main(["analyze", str(campaign_dir)]) == 2
    assert "capture.json: no such file; give the campaign's directory" in _error(capsys)
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(campaign_dir), "--allreduce-floor", "a.json", "--floors-under", "b"])
    assert exc.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_console_script_gives_the_summary_vllm_trace_summary_gives(campaign_dir):
    tool, traces_tool = BIN / "vllm-campaign-report", BIN / "vllm-trace-summary"
    if not tool.exists() or not traces_tool.exists():
        pytest.skip("the console scripts are not installed (pip install -e .)")
    done = subprocess.run([str(tool), "analyze", str(campaign_dir), "--decode-pattern", PATTERN],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    traces = sorted(str(p) for p in campaign_dir.glob("*.pt.trace.json.gz"))
    alone = subprocess.run([str(traces_tool), *traces, "--format", "json", "--decode-pattern", PATTERN,
                            "--topology", str(campaign_dir / "topology.txt"), "--tensor-parallel-size", "2"],
                           capture_output=True, text=True, timeout=300)
    assert alone.returncode == 0, alone.stderr
    assert json.loads((campaign_dir / "summary.json").read_text()) == json.loads(alone.stdout)


def test_vllm_trace_summary_takes_the_tp_size_as_analyze_gives_it(capsys):
    from vllm_ops.traces.cli import main as trace_summary

    traces = sorted(str(p) for p in H200.glob("*.pt.trace.json.gz"))
    # 1 divides the traces' world size of 2 (8 would contradict it, and is refused since issue 30)
    assert trace_summary([*traces, "--decode-pattern", PATTERN, "--tensor-parallel-size", "1", "--jobs", "1"]) == 0
    context = json.loads(capsys.readouterr().out)["context"]
    assert context["tensor_parallel_size"] == 1 and context["sources"]["tensor_parallel_size"] == "given"
    assert trace_summary([*traces, "--tensor-parallel-size", "0"]) == 2
    assert capsys.readouterr().err == "vllm-trace-summary: error: --tensor-parallel-size must be at least 1, got 0\n"


def test_the_checkpoint_and_the_pcie_links_of_the_capture(campaign_dir, tmp_path, capsys):
    """capture.json's checkpoint record gives the summary its decode ledger, and its PCIe links (rank 1's
    GPU at x4 of x16) a warning, the verdict's evidence and first step, campaign.json's fabric and a table."""
    from vllm_ops import fabric
    from vllm_ops_host.checkpoint import read_checkpoint

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_hidden_layers": 61, "hidden_size": 7168,
                                                   "intermediate_size": 28672, "num_attention_heads": 0,
                                                   "torch_dtype": "bfloat16"}))
    subprocess.run([str(BIN / "python"), str(REPO / "molecule" / "resources" / "toy_checkpoint.py"), str(model),
                    "--shards", "4"], check=True, capture_output=True)
    record = read_checkpoint(str(model))
    bus = ["00000000:18:00.0", "00000000:2A:00.0"]
    links = {"read": True, "reason": None, "during": "during the profiled requests", "interval_s": 2.0, "samples": 2,
             "failed_samples": 0, "query": [], "errors": [], "p2p_read": None,
             "gpus": [{"index": i, "bus_id": bus[i], "gen_current": 5, "gen_max": 5, "width_current": (16, 4)[i],
                       "width_max": 16, "utilization_pct": 70} for i in range(2)],
             "compute_apps": [{"pid": 40 + i, "process_name": f"VLLM::Worker_TP{i}", "bus_id": bus[i],
                               "used_mib": 9000} for i in range(2)]}
    capture = json.loads((campaign_dir / "capture.json").read_text())
    capture.update(checkpoint=record, fabric=links)
    (campaign_dir / "capture.json").write_text(json.dumps(capture))
    assert main(["analyze", str(campaign_dir), "--decode-pattern", PATTERN]) == 0
    lines = capsys.readouterr().out.splitlines()
    d = str(campaign_dir)

    found = fabric.findings(fabric.assess({"tensor_parallel_size": 2, "environment": capture["environment"],
                                           "fabric": links}))
    assert [(f["kind"], f["gpu"], f["rank"]) for f in found] == [("pcie-link-degraded", 1, 1)]
    # the decode steps are '^decode_step$' spans, whose names say no tokens: the ledger says so, never guesses
    want = summarize(sorted(str(p) for p in campaign_dir.glob("*.pt.trace.json.gz")), SummaryOptions(
        decode_pattern=PATTERN, context={"interconnect": "nvlink", "tensor_parallel_size": 2}, checkpoint=record,
        fabric=found))
    summary = json.loads((campaign_dir / "summary.json").read_text())
    assert summary == {"schema": "vllm-ops/summary/1", **json.loads(json.dumps(want))}  # the record's file
    assert summary["ledger"]["ranks"][1]["floors"]["weights"] is None
    assert "the tokens per step are unknown" in summary["ledger"]["ranks"][1]["not_measured"]["reads"]
    assert summary["verdict"]["evidence"]["pcie_link"][0]["gpu"] == 1
    assert summary["verdict"]["next"][0] == fabric.advice_for_rank(found, 1)[0]

    record_json = json.loads((campaign_dir / "campaign.json").read_text())
    assert record_json["fabric"]["findings"] == json.loads(json.dumps(found))
    assert [x["degraded"] for x in record_json["fabric"]["assessment"]["links"]] == [[], ["width"]]
    assert record_json["checkpoint"] == {"path": str(model), "bytes": 61 * (2 * 7168 * 28672 + 7168) * 2,
                                         "tensors": 183, "error": None}
    assert record_json["ledger_png"] == "ledger.png" and (campaign_dir / "ledger.png").read_bytes()[:8] == PNG
    assert lines[4].startswith(f"wrote {d}/ledger.png (") and "(2 warnings)" in lines[-1]

    text = (campaign_dir / "report.md").read_text()
    said = fabric.describe(found[0])
    assert said == ("PCIe link of GPU 1 (00000000:2A:00.0, rank 1) at x4 of x16, Gen5 of Gen5 (25% of its bandwidth), "
                    "read during the profiled requests")
    for line in ("## PCIe links, read during the profiled requests\n",
                 "| 1 | 00000000:2A:00.0 | 1 | x4 of x16 | Gen5 of Gen5 | 70% | 25% | width |",
                 "| 0 | 00000000:18:00.0 | 0 | x16 of x16 | Gen5 of Gen5 | 70% | 100% | no |",
                 f"- **{said}**", f"| pcie_link | {said} |", f"- {said}.",
                 "## The steady decode step against its floor (the decode ledger)\n",
                 "![The decode ledger: each part of the steady decode step, measured, beside its floor, per rank]"
                 "(ledger.png)", "- rank 1, reads: the tokens per step are unknown"):
        assert line in text, line

    # the tokens the names do not give: the ledger's whole floor, with the spec bandwidth labelled
    summary = summarize(sorted(str(p) for p in campaign_dir.glob("*.pt.trace.json.gz")), SummaryOptions(
        decode_pattern=PATTERN, context={"tensor_parallel_size": 2}, checkpoint=record, tokens=1))
    floor_ms = 61 * (2 * 7168 * 28672 + 7168) * 2 / 2 / 4800e9 * 1e3
    assert summary["ledger"]["ranks"][1]["floors"]["weights"] == pytest.approx(floor_ms, abs=1e-4)
    assert "GEMMs at 86% of HBM bandwidth (4800 GB/s, spec): memory-bound" in verdict_sentence(summary)


def test_the_reports_model_loads_come_from_job_json(campaign_dir, capsys):
    """Each load the job recorded (the profiling variant's, then the normal service's), in the report with its
    phases and set against the disk's floor; the load records are built from lines timed here."""
    from vllm_ops_host import loads

    def a_load(total, weights, variant):
        lines = [(500.0 + 3.0, "INFO [gpu_model_runner.py:5040] Starting to load model /models/kimi..."),
                 (500.0 + 3.0 + weights, f"INFO [default_loader.py:501] Loading weights took {weights:.2f} seconds"),
                 (500.0 + total, "INFO:     Application startup complete.")]
        return dict(loads.parse_load(lines, t0=500.0, checkpoint_bytes=540_000_000_000), variant=variant)

    job = json.loads((campaign_dir / "job.json").read_text())
    job["loads"] = [a_load(1860.0, 1740.0, "profiling"), a_load(1800.0, 1700.0, None)]
    job["disk"] = {"gbps": 2.1, "bytes": 1 << 30, "seconds": 0.51, "method": "O_DIRECT", "resident_fraction": 0.0}
    (campaign_dir / "job.json").write_text(json.dumps(job))
    assert main(["analyze", str(campaign_dir), "--decode-pattern", PATTERN]) == 0
    capsys.readouterr()
    record = json.loads((campaign_dir / "campaign.json").read_text())
    assert [x["total_s"] for x in record["model_loads"]["loads"]] == [1860.0, 1800.0]
    assert [x["variant"] for x in record["model_loads"]["loads"]] == ["profiling", None]
    text = (campaign_dir / "report.md").read_text()
    section = text.split("## Model loads", 1)[1].split("\n## ", 1)[0]
    # 540 GB in 1740 s is 0.31 GB/s, in 1700 s 0.32 GB/s: far under a 2.1 GB/s disk
    assert "| 1 | profiling | ready in 31.0 min: start 3.0 s, weights 29.0 min (540.0 GB at 0.31 GB/s)" in section
    assert "| 2 | the normal service | ready in 30.0 min: start 3.0 s, weights 28.3 min (540.0 GB at 0.32 GB/s)" \
        in section
    assert section.count("not disk-bound") >= 2 and "this disk reads 2.10 GB/s" in section
