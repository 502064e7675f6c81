"""vllm_ops.traffic: recordings read back, the replay's file, the mix, and a replay's fidelity.

The recordings are written here by hand in the recorder's format (docs/traffic.md): two recorder processes
(epochs) whose ids collide, a refused request and a cut one. Every expected figure is computed here, with
numpy where it is a statistic, never by the code under test.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from vllm_ops import traffic

START_A, START_B = 1_800_000_000.0, 1_800_000_030.0
BLOCK = 64


def write(directory, name, start, epoch, lines, block=BLOCK):
    (directory / f"traffic-{name}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (directory / f"traffic-{name}.json").write_text(json.dumps({
        "schema": "vllm-ops/traffic/1", "block": block, "epoch": epoch, "start": start, "end": start + 60,
        "vllm_version": "0.32.0", "requests": len(lines)}))


def line(ts, inp, out, ids, status=200):
    return {"timestamp": ts, "input_length": inp, "output_length": out, "hash_ids": ids, "endpoint": "completions",
            "stream": False, "status": status}


@pytest.fixture
def recording(tmp_path):
    # epoch a: written as requests end, so not in arrival order; a request that began before the window
    write(tmp_path, "a", START_A, "aaaa", [
        line(2000, 100, 10, [0, 1]), line(-500, 130, 20, [0, 1, 2]), line(1000, 64, 5, [3]),
        line(2500, 70, None, [], status=400),   # refused
        line(3000, 50, 0, [4])])                # cut before its first token
    # epoch b: its ids start at 0 again and mean other blocks
    write(tmp_path, "b", START_B, "bbbb", [line(0, 100, 10, [0, 1]), line(4000, 300, 40, [0, 1, 2, 3, 4])])
    return tmp_path


def test_a_recording_is_read_in_arrival_order_and_replayed_with_ids_renumbered_per_epoch(recording, tmp_path):
    read = traffic.read([recording])
    arrivals = [r.arrival for r in read.requests]
    assert arrivals == sorted(arrivals) and arrivals[0] == START_A - 0.5 and arrivals[-1] == START_B + 4
    assert read.block == BLOCK and read.versions == ["0.32.0"]
    lines = traffic.replay_lines(read.requests)
    # the replayable ones by arrival: a's -500, 1000, 2000; b's 0, 4000 (30 s later)
    assert [x["timestamp"] for x in lines] == [0, 1500, 2500, 30500, 34500]
    assert [(x["input_length"], x["output_length"]) for x in lines] == [(130, 20), (64, 5), (100, 10), (100, 10),
                                                                        (300, 40)]
    # (a,0)->0, (a,1)->1, (a,2)->2, (a,3)->3, then b's own blocks: (b,0)->4 ... (b,4)->8
    assert [x["hash_ids"] for x in lines] == [[0, 1, 2], [3], [0, 1], [4, 5], [4, 5, 6, 7, 8]]
    expected = traffic.write_replay(read, tmp_path / "replay.jsonl")
    assert (expected.requests, expected.left_out) == (5, 2)
    assert expected.input_tokens == 130 + 64 + 100 + 100 + 300 and expected.output_tokens == 85
    assert expected.span_s == 34.5 and expected.block == BLOCK
    written = [json.loads(x) for x in (tmp_path / "replay.jsonl").read_text().splitlines()]
    assert written == lines and set(written[0]) == {"timestamp", "input_length", "output_length", "hash_ids"}


def test_a_window_of_the_recording(recording):
    read = traffic.read([recording])
    window = traffic.select(read, START_A, START_B)
    assert [r.arrival - START_A for r in window.requests] == [1, 2, 2.5, 3]


def test_the_mix_of_a_recording(recording):
    requests = traffic.read([recording]).requests
    mix = traffic.mix(requests, BLOCK)
    kept = [r for r in requests if r.status == 200 and r.input_length and r.output_length]
    gaps = np.diff([r.arrival for r in kept])
    assert mix["requests"] == 5 and mix["left_out"] == 2
    assert mix["burstiness"] == pytest.approx(np.std(gaps) / np.mean(gaps))
    assert mix["rate_per_s"] == pytest.approx(4 / 34.5)
    inputs = [r.input_length for r in kept]
    for p in (50, 90, 99):
        assert mix["input"][f"p{p}"] == np.percentile(inputs, p, method="inverted_cdf")
    assert mix["input"]["tokens"] == sum(inputs) and mix["input"]["max"] == 300
    histogram = {h["le"]: h["count"] for h in mix["input"]["histogram"]}
    assert histogram[64] == 1 and histogram[128] == 2 and histogram[256] == 1 and histogram[512] == 1
    # blocks, in arrival order: a[0,1,2] a[3] a[0,1] b[0,1] b[0,1,2,3,4]: 13 blocks, 4 seen before
    # (a0, a1 again; b0, b1 again); first blocks a0 x2, a3, b0 x2: 4 of 5 requests share theirs
    assert mix["prefix"]["blocks"] == 13 and mix["prefix"]["repeated_share"] == pytest.approx(4 / 13)
    assert mix["prefix"]["shared_first_share"] == pytest.approx(4 / 5)
    # arrivals 0, 1.5, 2.5, 30.5, 34.5 s: all in the first minute
    assert mix["per_minute"] == [5]


def served_as_recorded(expected, bounds=(1, 8, 64, 128, 256, 512)):
    """What a faithful replay makes the server count: the same requests and tokens, at the same span."""
    def cumulative(lengths):
        counts = {b: sum(1 for v in lengths if v <= b) for b in bounds}
        return counts | {math.inf: len(lengths)}

    return {"requests": expected.requests, "failed": 0, "input_tokens": expected.input_tokens,
            "output_tokens": expected.output_tokens, "duration_s": expected.span_s + 3,
            "prompt_buckets": cumulative(expected.input_lengths),
            "generation_buckets": cumulative(expected.output_lengths)}


def test_a_faithful_replay_is_valid(recording, tmp_path):
    expected = traffic.write_replay(traffic.read([recording]), tmp_path / "r.jsonl")
    verdict = traffic.fidelity(expected, served_as_recorded(expected))
    assert verdict.valid and verdict.message == "the replay reproduced the recording"
    assert {c.name for c in verdict.checks} == {"requests", "input_tokens", "output_tokens", "span",
                                               "prompt_buckets", "generation_buckets"}


def test_the_chunk_size_trap_is_named(tmp_path):
    # a recording of 512-token blocks replayed with vLLM's default chunk of 16: every prompt 32x short
    write(tmp_path, "m", START_A, "cccc", [line(0, 2048, 8, [0, 1, 2, 3]), line(1000, 1024, 8, [0, 1])], block=512)
    expected = traffic.write_replay(traffic.read([tmp_path]), tmp_path / "r.jsonl")
    served = served_as_recorded(expected) | {"input_tokens": (4 + 2) * 16, "prompt_buckets": None}
    verdict = traffic.fidelity(expected, served)
    assert not verdict.valid
    (failed,) = [c for c in verdict.checks if not c.ok]
    assert failed.name == "input_tokens" and failed.got == 96 and failed.expected == 3072
    assert "(32.0x short)" in failed.why and "--timed-trace-chunk-hash-size" in failed.why and "512" in failed.why


@pytest.mark.parametrize(("change", "failing"), [
    ({"failed": 1}, "requests"),
    ({"requests": 4}, "requests"),
    ({"output_tokens": 70}, "output_tokens"),
    ({"duration_s": 10.0}, "span"),
])
def test_a_replay_that_did_not_reproduce_the_recording_is_invalid(recording, tmp_path, change, failing):
    expected = traffic.write_replay(traffic.read([recording]), tmp_path / "r.jsonl")
    verdict = traffic.fidelity(expected, served_as_recorded(expected) | change)
    assert not verdict.valid and [c.name for c in verdict.checks if not c.ok] == [failing]


def test_lengths_spread_otherwise_than_recorded_are_invalid(recording, tmp_path):
    expected = traffic.write_replay(traffic.read([recording]), tmp_path / "r.jsonl")
    served = served_as_recorded(expected)
    # the same total, but every prompt at 128 or under: at the 128 bucket 100% against the recording's 60%
    served["prompt_buckets"] = {1: 0, 8: 0, 64: 1, 128: 5, 256: 5, 512: 5, math.inf: 5}
    verdict = traffic.fidelity(expected, served)
    (failed,) = [c for c in verdict.checks if not c.ok]
    assert failed.name == "prompt_buckets" and failed.got == pytest.approx(0.4)


def test_recordings_that_cannot_be_replayed_together_are_refused(tmp_path):
    write(tmp_path, "x", START_A, "x", [line(0, 10, 1, [0])], block=64)
    write(tmp_path, "y", START_A, "y", [line(0, 10, 1, [0])], block=16)
    with pytest.raises(traffic.TrafficInputError, match=r"blocks of \[16, 64\] tokens"):
        traffic.read([tmp_path])
    (tmp_path / "traffic-y.json").unlink()
    with pytest.raises(traffic.TrafficInputError, match=r"traffic-y\.json: the recording's sidecar cannot be read"):
        traffic.read([tmp_path])
    with pytest.raises(traffic.TrafficInputError, match="nothing-here does not exist"):
        traffic.read([tmp_path / "nothing-here"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(traffic.TrafficInputError, match="no recording"):
        traffic.read([tmp_path / "empty"])


def test_the_window_being_written_is_read_as_far_as_it_is_whole(recording):
    # copied while the recorder wrote its last line: that line is left out and counted, the rest read
    path = recording / "traffic-b.jsonl"
    whole = path.read_text()
    path.write_text(whole + json.dumps(line(5000, 80, 8, [5]))[:25])
    read = traffic.read([recording])
    assert read.partial == 1 and len(read.requests) == 7 and read.requests[-1].arrival == START_B + 4
    assert traffic.select(read, START_B).partial == 1
    # the last line whole but for its newline is the recorder's: kept
    path.write_text(whole + json.dumps(line(5000, 80, 8, [5])))
    read = traffic.read([recording])
    assert read.partial == 0 and read.requests[-1].arrival == START_B + 5
    # a bad line anywhere else is still an error, naming it
    path.write_text(whole.replace("\n", "\n{\"timestamp\": 1\n", 1))
    with pytest.raises(traffic.TrafficInputError, match=r"traffic-b\.jsonl:2: not a recorder's line"):
        traffic.read([recording])
