"""The tables on disk the reader and the per-step analysis use (``spill``): each ordering they
build gives what the same numpy call over one array in memory gives, to the last bit, in chunks
of at most ``CHUNK_ROWS`` records, whatever the values' spread (clumps, outliers, nan, ties)."""

import os
import tempfile

import numpy as np
import pytest

from vllm_ops.traces import spill, timeline
from vllm_ops.traces.reader import ACT_DTYPE, LAUNCH_DTYPE, TraceData
from vllm_ops.traces.spill import Table

CHUNK = 64


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch, tmp_path):
    monkeypatch.setattr(spill, "CHUNK_ROWS", CHUNK)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    yield
    assert os.listdir(tmp_path) == []  # tables are unlinked files: never in the folder


def _table(records, dtype):
    t = Table(dtype)
    t.append(np.asarray(records, dtype))
    return t


def _values(kind, rng, n):
    if kind == "uniform":
        return rng.random(n) * 1e6
    if kind == "clump and outlier":  # all but one within 1 us, one an hour later
        return np.r_[1e9 + rng.random(n - 1), 1e9 + 3.6e9]
    if kind == "nan and ties":
        v = rng.integers(0, 5, n).astype(float)
        v[rng.random(n) < 0.1] = np.nan
        return v
    if kind == "one value":
        return np.full(n, 7.0)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["uniform", "clump and outlier", "nan and ties", "one value"])
def test_sorted_batches_are_a_stable_sort_in_bounded_batches(kind):
    rng = np.random.default_rng(1)
    n = 2000
    r = np.zeros(n, ACT_DTYPE)
    r["ts"], r["corr"] = _values(kind, rng, n), np.arange(n)  # corr: the file order
    t = _table(r, ACT_DTYPE)
    batches = list(spill.sorted_batches(t, "ts"))
    assert all(len(b) <= CHUNK for b in batches)
    got = np.concatenate(batches)
    assert got["corr"].tolist() == np.argsort(r["ts"], kind="stable").tolist()
    t.close()


def test_integers_sort_exactly_even_beyond_a_double():
    big = 2**62
    corr = np.array([big + 3, big + 1, 5, big + 2, 0, big + 1] * 50, np.int64)
    r = np.zeros(len(corr), LAUNCH_DTYPE)
    r["corr"], r["ts"] = corr, np.arange(len(corr))
    t = _table(r, LAUNCH_DTYPE)
    got = np.concatenate(list(spill.sorted_batches(t, "corr")))
    assert got["ts"].tolist() == np.argsort(corr, kind="stable").tolist()
    t.close()


@pytest.mark.parametrize("n", [0, 1, 63, 64, 65, 1000, 4099])
def test_pairwise_sum_is_numpy_sum_to_the_last_bit(n):
    v = np.random.default_rng(n).random(n) * 10.0 ** np.random.default_rng(n + 1).uniform(-3, 4, n)
    t = _table(v, np.float64)
    assert spill.pairwise_sum(t) == np.sum(v)
    t.close()


def test_partition_groups_by_key_in_file_order_in_batches_of_whole_keys():
    keys = np.array([2, 0, -1, 2, 1, 0, 2, 2] * 30)
    rec = np.arange(len(keys)).astype(np.float64)
    counts = np.bincount(keys[keys >= 0], minlength=3)
    chunks = ((keys[i:i + 50], rec[i:i + 50]) for i in range(0, len(keys), 50))
    out, batches = spill.partition(chunks, counts, 70, np.float64)
    kept = keys >= 0
    assert out.load().tolist() == rec[kept][np.argsort(keys[kept], kind="stable")].tolist()
    assert batches == [(0, 60), (60, 90), (90, 210)]  # whole keys: 60 + 30 rows, then 120 alone
    out.close()


def _launch_times_in_memory(acts, launches):
    """The in-memory algorithm the reader used before the spills stayed on disk."""
    out = np.full(len(acts), np.nan)
    order = np.lexsort((launches["ts"], launches["corr"]))
    corr, ts = launches["corr"][order], launches["ts"][order]
    first = np.ones(len(corr), bool)
    first[1:] = corr[1:] != corr[:-1]
    corr, ts = corr[first], ts[first]
    idx = np.searchsorted(corr, acts["corr"])
    idx[idx >= len(corr)] = len(corr) - 1
    hit = (corr[idx] == acts["corr"]) & (acts["corr"] >= 0)
    out[hit] = ts[idx[hit]]
    return out


@pytest.mark.parametrize("spread", ["dense", "outlier", "one correlation"])
def test_launch_times_match_the_in_memory_join(spread):
    rng = np.random.default_rng(7)
    n = 1500
    if spread == "dense":
        corr = rng.permutation(n).astype(np.int64)
    elif spread == "outlier":
        corr = np.r_[np.arange(n - 1), 10**15].astype(np.int64)
    else:  # a graph launch and its driver call, repeated: one correlation for every call
        corr = np.full(n, 42, np.int64)
    launches = np.zeros(n, LAUNCH_DTYPE)
    launches["corr"], launches["ts"] = corr, rng.random(n) * 1e3
    acts = np.zeros(n + 200, ACT_DTYPE)
    acts["corr"] = np.r_[rng.choice(corr, n), rng.integers(-1, 2 * n, 200)]  # some without a launch
    data = TraceData(path="x", act_table=_table(acts, ACT_DTYPE), launch_table=_table(launches, LAUNCH_DTYPE))
    lt = timeline.launch_times(data)
    expected = _launch_times_in_memory(acts, launches)
    assert np.array_equal(lt.load(), expected, equal_nan=True)
    lt.close()
    data.close()
