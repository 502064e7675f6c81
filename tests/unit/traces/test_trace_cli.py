import json
import subprocess
import sys

from vllm_ops.traces.cli import main

STEP = "execute_context_0(0)_generation_1(1)"


def _trace(write_trace, ev, name="r0.json.gz", rank=0, world_size=1):
    events = [ev.span(STEP, 0.0, 100.0), ev.kernel("nvjet_x", 1.0, 4.0),
              ev.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 10.0, 6.0)]
    return write_trace(name, events, rank=rank, world_size=world_size)


def test_json_by_default(write_trace, ev, capsys):
    assert main([_trace(write_trace, ev)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ranks"][0]["categories"]["allreduce"]["share"] == 0.6
    assert set(out) >= {"ranks", "allreduce", "prefill", "warnings"}


def test_markdown(write_trace, ev, capsys):
    assert main([_trace(write_trace, ev), "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "| allreduce | 0.006 (60.0%) |" in out
    # the verdict comes first (one step has no period: nothing to judge), the kernel-time sums after it
    assert out.startswith("## Verdict\n\n**inconclusive: ")
    assert out.index("## Verdict") < out.index("## Steps") < out.index("## Decode steps")


def test_options_reach_the_library(write_trace, ev, capsys):
    path = _trace(write_trace, ev)
    assert main([path, "--decode-pattern", "^nothing$", "--top", "1", "--category", "mine=nvjet",
                 "--parser", "general", "--jobs", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["decode_pattern"] == "^nothing$" and out["ranks"][0]["decode_steps"] == 0


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "r0.json"
    bad.write_text("{not json")
    assert main([str(bad)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "r0.json: invalid JSON" in lines[0]


def test_empty_directory_exit_2(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert "directory holds no trace files" in capsys.readouterr().err


def test_keep_going(write_trace, ev, tmp_path, capsys):
    _trace(write_trace, ev, rank=0, world_size=2)
    (tmp_path / "r1.json.gz").write_bytes(b"")
    assert main([str(tmp_path)]) == 2
    assert "r1.json.gz: empty file" in capsys.readouterr().err
    assert main([str(tmp_path), "--keep-going"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert any("skipped" in w and "r1.json.gz: empty file" in w for w in out["warnings"])


def test_no_paths_and_bad_regex(capsys, write_trace, ev):
    assert main([]) == 2
    assert main([_trace(write_trace, ev), "--decode-pattern", "("]) == 2
    assert "invalid regular expression" in capsys.readouterr().err


def test_list_categories(capsys):
    assert main(["--list-categories"]) == 0
    out = capsys.readouterr().out
    assert "allreduce" in out and "moe_gemm" in out and "other" in out


def test_process_exits_2_without_traceback(tmp_path):
    bad = tmp_path / "cut.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03")
    proc = subprocess.run([sys.executable, "-m", "vllm_ops.traces.cli", str(bad)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "cut.json.gz: truncated gzip" in proc.stderr
