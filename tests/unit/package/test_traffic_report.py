"""vllm_ops.traffic_report: which of a host's recordings to fetch, and the report over every host's, from
recordings laid out as playbooks/traffic.yml fetches them (written here by hand in the recorder's format,
docs/traffic.md). Every expected figure is computed here, by hand or with numpy, never by the code under test.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest

from vllm_ops import traffic_report
from vllm_ops.traffic import TrafficInputError

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
BLOCK = 64


def line(ts, inp, out, ids, status=200):
    return {"timestamp": ts, "input_length": inp, "output_length": out, "hash_ids": ids, "status": status}


def write(directory, stamp, epoch, start, lines, *, version="0.32.0", cut="", **counts):
    """One recording as the recorder leaves it: traffic-<stamp>-<epoch>.jsonl and its sidecar."""
    directory.mkdir(parents=True, exist_ok=True)
    base = directory / f"traffic-{stamp}-{epoch[:8]}"
    base.with_suffix(".jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + cut)
    arrivals = [start + x["timestamp"] / 1000 for x in lines]
    sidecar = {"schema": "vllm-ops/traffic/1", "format": "mooncake", "block": BLOCK, "epoch": epoch,
               "vllm_version": version, "start": start, "end": max(arrivals), "requests": len(lines), "bytes": 0,
               "dropped": 0, "own": 0, "errors": 0, "failed_tokenize": 0, "prefix": "tokens"} | counts
    base.with_suffix(".json").write_text(json.dumps(sidecar))
    return base


@pytest.fixture
def artifacts(tmp_path):
    """Two hosts: h1, one recorder process over two windows an hour apart; h2, another process, its window
    fetched while the recorder wrote its last line."""
    h1, h2 = tmp_path / "traffic" / "h1", tmp_path / "traffic" / "h2"
    write(h1, "20270115T080000Z", "e1aaaaaaaa", T0, [
        line(0, 100, 10, [0, 1]), line(2000, 300, 20, [0, 1, 2, 3, 4]), line(5000, 50, 5, [5]),
        line(7000, 70, None, [6], status=400)], dropped=1, own=2)
    write(h1, "20270115T090000Z", "e1aaaaaaaa", T0 + 3600, [
        line(0, 120, 12, [0, 1, 7]), line(60000, 800, 80, list(range(8, 21)))], own=1, errors=1)
    write(h2, "20270115T083000Z", "e2bbbbbbbb", T0 + 1800, [
        line(0, 10, 1, [0]), line(500, 10, 1, [0]), line(90000, 2000, 200, [0, *range(1, 32)])],
          version="0.31.0", cut='{"timestamp": 91000, "input_le', own=5)
    return tmp_path


def nearest_rank(values, p):
    return float(np.percentile(values, p, method="inverted_cdf"))


def test_the_report_over_two_hosts(artifacts, capsys):
    assert traffic_report.main(["report", str(artifacts)]) == 0
    out = capsys.readouterr().out.splitlines()
    mix = json.loads((artifacts / "traffic" / "mix.json").read_text())
    assert mix["schema"] == "vllm-ops/traffic-mix/1" and mix["window"] == {"since": None, "until": None}

    h1 = mix["hosts"]["h1"]
    # the replayable requests, at T0 + 0, 2, 5 s, then an hour later + 0 and 60 s; the 400 is left out
    arrivals = [0, 2, 5, 3600, 3660]
    inputs, outputs = [100, 300, 50, 120, 800], [10, 20, 5, 12, 80]
    assert (h1["mix"]["requests"], h1["mix"]["left_out"], h1["recorded"]) == (5, 1, 6)
    assert h1["mix"]["span_s"] == 3660 and h1["mix"]["rate_per_s"] == pytest.approx(4 / 3660)
    gaps = np.diff(arrivals)
    assert h1["mix"]["burstiness"] == pytest.approx(np.std(gaps) / np.mean(gaps))
    for p in (50, 90, 99):
        assert h1["mix"]["input"][f"p{p}"] == nearest_rank(inputs, p)
        assert h1["mix"]["output"][f"p{p}"] == nearest_rank(outputs, p)
    assert h1["mix"]["input"]["tokens"] == sum(inputs) and h1["mix"]["output"]["max"] == 80
    # one process: blocks 0, 1 of its first request come back in its second and in the next window's first
    # (2 + 5 + 1 + 3 + 13 = 24 blocks, 4 seen before); first blocks 0 x3, 5, 8: 3 of 5 requests share theirs
    assert h1["mix"]["prefix"]["repeated_share"] == pytest.approx(4 / 24)
    assert h1["mix"]["prefix"]["shared_first_share"] == pytest.approx(3 / 5)
    assert h1["mix"]["per_minute"] == [3] + [0] * 59 + [1, 1]
    assert h1["counts"] == {"requests": 6, "dropped": 1, "own": 3, "errors": 1, "failed_tokenize": 0}
    assert (h1["first"], h1["last"], h1["partial"]) == ("2027-01-15T08:00:00Z", "2027-01-15T09:01:00Z", 0)
    assert h1["versions"] == ["0.32.0"] and h1["block"] == BLOCK and h1["files"] == 2

    h2 = mix["hosts"]["h2"]
    # the last line, cut mid-write, is left out and counted
    assert (h2["mix"]["requests"], h2["partial"], h2["counts"]["own"]) == (3, 1, 5)
    assert h2["mix"]["rate_per_s"] == pytest.approx(2 / 90) and h2["versions"] == ["0.31.0"]
    assert h2["mix"]["input"]["p50"] == 10 and h2["mix"]["input"]["max"] == 2000

    every = mix["all"]
    all_arrivals = sorted([*arrivals, 1800, 1800.5, 1890])
    assert every["mix"]["requests"] == 8 and every["recorded"] == 9 and every["partial"] == 1
    assert every["mix"]["rate_per_s"] == pytest.approx(7 / 3660)
    gaps = np.diff(all_arrivals)
    assert every["mix"]["burstiness"] == pytest.approx(np.std(gaps) / np.mean(gaps))
    assert every["mix"]["input"]["p50"] == nearest_rank([*inputs, 10, 10, 2000], 50)
    # no block is shared across hosts: h2's 1 + 1 + 32 blocks, 2 of them seen before (its 0 twice)
    assert every["mix"]["prefix"]["repeated_share"] == pytest.approx((4 + 2) / (24 + 34))
    assert every["counts"]["own"] == 8 and every["block"] == BLOCK

    assert out[0].startswith("h1: 5 request(s) over 61.0 min, 0.00109/s") and "dropped 1, errors 1, own 3" in out[0]
    assert out[1].startswith("h2: 3 request(s) over 1.5 min") and len(out) == 4
    assert out[-1] == ("8 replayable request(s) of 9 recorded on 2 of 2 host(s), 2027-01-15T08:00:00Z to "
                       "2027-01-15T09:01:00Z")

    report = (artifacts / "traffic" / "traffic.md").read_text()
    for host in ("h1", "h2"):
        assert f"\n## {host}\n" in report and f"-e vllm_bench_traffic={artifacts / 'traffic' / host}`" in report
    assert "## All hosts together" in report and "1 last line(s) cut" in report and "0.31.0" in report
    assert "1 dropped (queue full), 1 errors, 3 own" in report and "(blocks of 64 tokens)" in report
    png = (artifacts / "traffic" / "traffic.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000


def test_a_window_keeps_its_requests_and_the_counts_of_the_recordings_that_overlap_it(artifacts, capsys):
    # from 08:16:40 (T0 + 1000) to T0 + 3630: h1's next window's first request, and all of h2's
    assert traffic_report.main(["report", str(artifacts), "--since", "2027-01-15T08:16:40",
                                "--until", str(T0 + 3630)]) == 0
    mix = json.loads((artifacts / "traffic" / "mix.json").read_text())
    assert mix["window"] == {"since": "2027-01-15T08:16:40Z", "until": "2027-01-15T09:00:30Z"}
    h1 = mix["hosts"]["h1"]
    assert h1["mix"]["requests"] == 1 and h1["first"] == h1["last"] == "2027-01-15T09:00:00Z"
    # the first window's sidecar ends at T0 + 7, before the window: its counts are not the window's
    assert h1["counts"] == {"requests": 2, "dropped": 0, "own": 1, "errors": 1, "failed_tokenize": 0}
    assert mix["hosts"]["h2"]["mix"]["requests"] == 3 and mix["all"]["mix"]["requests"] == 4
    assert "from 2027-01-15T08:16:40Z to 2027-01-15T09:00:30Z" in (artifacts / "traffic" / "traffic.md").read_text()
    capsys.readouterr()
    # a window before every request: h2 is left without any, and says so
    assert traffic_report.main(["report", str(artifacts), "--until", "2027-01-15T08:10:00+00:00"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "h2: no request in the window (1 recording(s))"


def found(directory, **changes):
    """ansible.builtin.find's files for the recordings in ``directory``: path, size, mtime (the .jsonl's last
    request's arrival + 1 s) and the sidecars' sha1."""
    out = []
    for path in sorted(directory.iterdir()):
        entry = {"path": f"/var/lib/vllm/traffic/{path.name}", "size": path.stat().st_size, "mtime": 0.0}
        if path.suffix == ".json":
            entry["checksum"] = hashlib.sha1(path.read_bytes()).hexdigest()
        else:
            entry["mtime"] = json.loads(path.with_suffix(".json").read_text())["end"] + 1
        out.append(entry | changes.get(path.name, {}))
    return out


def test_pending_is_what_the_controller_does_not_hold_as_the_host_has_it(artifacts, tmp_path):
    host = artifacts / "traffic" / "h1"  # what the host has
    here = tmp_path / "here"
    a, b = "traffic-20270115T080000Z-e1aaaaaa", "traffic-20270115T090000Z-e1aaaaaa"
    on_host = [*found(host), {"path": "/var/lib/vllm/traffic/traffic-20270115T100000Z-e1aaaaaa.jsonl", "size": 5,
                              "mtime": T0 + 7300}]
    # nothing here yet: every recording with its sidecar; the one without a sidecar is named, not fetched
    assert traffic_report.pending(here, on_host) == {
        "fetch": [f"{a}.jsonl", f"{a}.json", f"{b}.jsonl", f"{b}.json"], "recordings": 2, "outside": 0,
        "unpaired": ["traffic-20270115T100000Z-e1aaaaaa.jsonl"]}
    shutil.copytree(host, here)
    assert traffic_report.pending(here, on_host)["fetch"] == []
    # the window being written grew; the closed one's sidecar counted more (another request of the project's)
    grown = found(host, **{f"{b}.jsonl": {"size": (host / f"{b}.jsonl").stat().st_size + 120},
                           f"{a}.json": {"checksum": "0" * 40}})
    assert traffic_report.pending(here, grown)["fetch"] == [f"{a}.jsonl", f"{a}.json", f"{b}.jsonl", f"{b}.json"]
    assert traffic_report.pending(here, found(host, **{f"{b}.jsonl": {"size": 1}}))["fetch"] == [
        f"{b}.jsonl", f"{b}.json"]
    # a window: its span on the host is from its name's start to the .jsonl's last change
    assert traffic_report.pending(tmp_path / "none", on_host, since=T0 + 10) == {
        "fetch": [f"{b}.jsonl", f"{b}.json"], "recordings": 1, "outside": 1,
        "unpaired": ["traffic-20270115T100000Z-e1aaaaaa.jsonl"]}
    assert traffic_report.pending(tmp_path / "none", on_host, until=T0 + 3600)["fetch"] == [f"{a}.jsonl", f"{a}.json"]


def test_pending_reads_the_hosts_files_on_stdin(artifacts, tmp_path, capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(found(artifacts / "traffic" / "h2"))))
    assert traffic_report.main(["pending", str(tmp_path / "h2"), "--since", "", "--until", ""]) == 0
    assert json.loads(capsys.readouterr().out)["fetch"] == ["traffic-20270115T083000Z-e2bbbbbb.jsonl",
                                                            "traffic-20270115T083000Z-e2bbbbbb.json"]
    monkeypatch.setattr("sys.stdin", io.StringIO("{}"))
    assert traffic_report.main(["pending", str(tmp_path / "h2")]) == 2
    assert "not a list of ansible.builtin.find's files" in capsys.readouterr().err


@pytest.mark.parametrize(("args", "message"), [
    (["report", "{tmp}"], "no recording under {tmp}/traffic/<host>/: fetch them with playbooks/traffic.yml first"),
    (["report", "{artifacts}", "--since", "2030-01-01"],
     "no request from 2030-01-01T00:00:00Z to the last in the recordings of 2 host(s)"),
    (["report", "{artifacts}", "--since", "yesterday"], "--since 'yesterday': not a time: ISO 8601"),
    (["report", "{artifacts}", "--since", "2027-01-15T09:00:00Z", "--until", "2027-01-15T08:00:00Z"],
     "the window is empty: since 2027-01-15T09:00:00Z is not before until 2027-01-15T08:00:00Z"),
])
def test_nothing_to_report_is_one_line(artifacts, tmp_path, capsys, args, message):
    (tmp_path / "empty").mkdir()
    names = {"tmp": tmp_path / "empty", "artifacts": artifacts}
    assert traffic_report.main([a.format(**names) for a in args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vllm-traffic-report: error: ") and message.format(**names) in err
    assert err.count("\n") == 1


def test_a_recording_the_reader_refuses_names_its_host(artifacts):
    (artifacts / "traffic" / "h2" / "traffic-20270115T083000Z-e2bbbbbb.json").write_text("{}")
    with pytest.raises(TrafficInputError, match=r"traffic/h2: .*schema None"):
        traffic_report.summary(artifacts)
