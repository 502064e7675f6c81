"""vllm_ops.allreduce: the floor read and checked, interpolated, refused where it does not apply, and
`vllm-allreduce-report floor` (once `vllm-campaign-report floor`) with the same output and exit codes."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from vllm_ops.allreduce import AllreduceInputError
from vllm_ops.allreduce.floor import floor_at, load_floor, usable
from vllm_ops.errors import VllmOpsError

H200 = Path(__file__).resolve().parents[2] / "data" / "traces" / "h200_tp2_decode"
SCRIPT = Path(sys.executable).parent / "vllm-allreduce-report"


def _floor(world=2, sizes=((1024, 5.0), (16384, 8.0), (1048576, 40.0))):
    return {"tool": "allreduce_bench", "schema": 1, "world_size": world, "backend": "nccl", "nccl_version": "2.28.9",
            "gpu_name": "NVIDIA H200", "timing": "CUDA graph", "environment": {"NCCL_PROTO": "LL"},
            "sizes": [{"bytes": b, "median_us": us} for b, us in sizes]}


def test_floor_at_a_measured_size_and_between_two():
    fl = load_floor(_floor())
    assert floor_at(fl, 16384) == (8.0, "measured")
    # log-log between 1024 B (5 µs) and 16384 B (8 µs), computed here
    t = (math.log(14336) - math.log(1024)) / (math.log(16384) - math.log(1024))
    want = math.exp(math.log(5.0) + t * (math.log(8.0) - math.log(5.0)))
    got, how = floor_at(fl, 14336)
    assert how == "interpolated" and got == pytest.approx(want, rel=1e-12)
    assert floor_at(fl, 512)[0] is None and "outside the sizes measured (1024-1048576)" in floor_at(fl, 512)[1]


def test_a_floor_applies_only_to_a_group_of_its_size():
    assert usable(load_floor(_floor(world=2)), 2) is None
    assert usable(load_floor(_floor(world=8)), 2) == "measured with 8 ranks, the group has 2"
    assert "one rank, where NCCL moves no data" in usable(load_floor(_floor(world=1)), 2)


@pytest.mark.parametrize(("doc", "message"), [
    ({"tool": "nccl-tests"}, "not an all-reduce floor"),
    (dict(_floor(), sizes=[]), "has no sizes"),
    (dict(_floor(), sizes=[{"bytes": 0, "median_us": 1.0}]), "lacks a positive bytes or median_us"),
    (dict(_floor(), world_size=None), "has no world_size"),
])
def test_bad_floors(doc, message):
    with pytest.raises(AllreduceInputError, match=message):
        load_floor(doc)


def test_bad_floor_files(tmp_path):
    with pytest.raises(AllreduceInputError, match="cannot read the all-reduce floor"):
        load_floor(tmp_path / "missing.json")
    (tmp_path / "x.json").write_text("{")
    with pytest.raises(AllreduceInputError, match="is not JSON"):
        load_floor(tmp_path / "x.json")


GPU_RESULT = Path(__file__).resolve().parents[2] / "gpu" / "results" / "allreduce_h200_ws1_default.json"


def test_the_floor_report_of_the_recorded_h200_run(tmp_path, capsys):
    from vllm_ops.allreduce.cli import main

    raw = json.loads(GPU_RESULT.read_text())
    assert main(["floor", str(GPU_RESULT), "--png", str(tmp_path / "floor.png")]) == 0
    text = capsys.readouterr().out
    assert text.startswith("## All-reduce floor: 1 rank, nccl, NVIDIA H200\n")
    assert "**one rank: NCCL moves no data" in text  # said, not hidden
    row = next(s for s in raw["sizes"] if s["bytes"] == 14336)
    assert f"| 14336 | 1 | {row['median_us']:.3f} | {row['p90_us']:.3f} | {row['min_us']:.3f} |" in text
    assert (tmp_path / "floor.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert text.rstrip().endswith(f"wrote {tmp_path / 'floor.png'} ({len(raw['sizes'])} sizes)")


def test_the_floor_report_of_a_bad_file(tmp_path, capsys):
    from vllm_ops.allreduce.cli import main

    (tmp_path / "f.json").write_text('{"tool": "other"}')
    assert main(["floor", str(tmp_path / "f.json")]) == 2
    assert "not an all-reduce floor" in capsys.readouterr().err


def test_a_gloo_floor_is_never_a_floor_for_a_gpu_trace():
    assert "measured with gloo on the CPU, not NCCL" in usable(load_floor(dict(_floor(), backend="gloo")), 2)


def _run(label, rows, env=None):
    """A floor as allreduce_bench.py writes it; rows are (bytes, batch, median, min, p90)."""
    return dict(_floor(), label=label, environment=env or {},
                sizes=[{"bytes": b, "batch_size": bs, "median_us": m, "min_us": lo, "p90_us": hi}
                       for b, bs, m, lo, hi in rows])


def test_variants_side_by_side_with_their_ratio_and_the_noise_band(tmp_path, capsys):
    from vllm_ops.allreduce.cli import main

    unit = _run("unit", [(14336, 1, 20.0, 18.0, 23.0), (1048576, None, 40.0, 39.0, 41.0)], {"NCCL_PROTO": "LL"})
    ll128 = _run("LL128", [(14336, 1, 22.0, 21.0, 24.0), (1048576, None, 30.0, 29.0, 31.0)],
                 {"NCCL_PROTO": "LL128"})
    paths = []
    for run in (unit, ll128):
        paths.append(tmp_path / f"allreduce-{run['label']}.json")
        paths[-1].write_text(json.dumps(run))
    md, png = tmp_path / "allreduce.md", tmp_path / "allreduce.png"
    assert main(["floor", *map(str, paths), "--markdown", str(md), "--png", str(png),
                 "--failed", "Simple=allreduce_bench: measurement failed: rank 1 died"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    # 22 µs lies inside unit's 18-23 µs spread at 14336 B: "same", never a ratio read as a change
    assert first == ("all-reduce on 2 ranks (nccl, NVIDIA H200): batch 1 (14336 B) 20.0 µs; at 14336 B: LL128 same; "
                     "1 failed (Simple)")
    text = md.read_text()
    assert "| 14336 | 1 | 20.000 | 22.000 (1.10, same) |" in text
    assert f"| 1048576 | - | 40.000 | 30.000 ({30 / 40:.2f}) |" in text  # outside 39-41: a difference
    assert "- **Simple**: failed: allreduce_bench: measurement failed: rank 1 died" in text
    assert "- **LL128**: environment `NCCL_PROTO=LL128`" in text
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_bad_failed_argument_is_refused(tmp_path, capsys):
    from vllm_ops.allreduce.cli import main

    (tmp_path / "u.json").write_text(json.dumps(_run("unit", [(14336, 1, 20.0, 18.0, 23.0)])))
    assert main(["floor", str(tmp_path / "u.json"), "--failed", "no-equals-sign"]) == 2
    assert "--failed 'no-equals-sign': expected NAME=WHY" in capsys.readouterr().err


def test_a_bad_floor_given_to_the_trace_summary_is_one_line_and_exit_2(tmp_path, capsys):
    from vllm_ops.traces.cli import main as trace_summary

    (tmp_path / "f.json").write_text('{"tool": "other"}')
    assert trace_summary([str(H200), "--allreduce-floor", str(tmp_path / "f.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("vllm-trace-summary: error: ") and "not an all-reduce floor" in err
    assert issubclass(AllreduceInputError, VllmOpsError)


@pytest.mark.skipif(not SCRIPT.exists(), reason="the console script is not installed (pip install -e .)")
def test_the_console_script(tmp_path):
    (tmp_path / "u.json").write_text(json.dumps(_floor()))
    done = subprocess.run([str(SCRIPT), "floor", str(tmp_path / "u.json")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("## All-reduce floor: 2 ranks, nccl, NVIDIA H200\n")
    bad = subprocess.run([str(SCRIPT), "floor", str(tmp_path / "none.json")], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and bad.stderr.startswith("vllm-allreduce-report: error: ")
    assert "cannot read the all-reduce floor" in bad.stderr and bad.stderr.count("\n") == 1
