"""TTFT/TPOT statistics on known lists (the duration in words: tests/unit/package/test_job.py)."""

import statistics

import pytest

from vllm_ops.campaign import CampaignInputError, latency_stats


def test_one_to_ten():
    s = latency_stats(list(range(1, 11)))
    # linear interpolation: p50 at position 4.5, p90 at 8.1, p99 at 8.91 (0-based)
    assert s == {"count": 10, "mean": 5.5, "p50": 5.5, "p90": 9.1, "p99": 9.91, "min": 1.0, "max": 10.0}


def test_agrees_with_statistics_quantiles_inclusive():
    samples = [38.2, 41.0, 40.1, 55.7, 39.9, 40.4, 120.3, 42.8, 39.0, 40.0, 41.7]
    q = statistics.quantiles(samples, n=100, method="inclusive")
    s = latency_stats(samples)
    assert (s["p50"], s["p90"], s["p99"]) == (round(q[49], 3), round(q[89], 3), round(q[98], 3))
    assert s["mean"] == round(statistics.fmean(samples), 3)


def test_order_does_not_matter_and_one_sample():
    assert latency_stats([3.0, 1.0, 2.0]) == latency_stats([1, 2, 3])
    assert latency_stats([7.25]) == {"count": 1, "mean": 7.25, "p50": 7.25, "p90": 7.25, "p99": 7.25,
                                     "min": 7.25, "max": 7.25}


def test_empty_and_digits():
    assert latency_stats([]) == {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None,
                                 "min": None, "max": None}
    assert latency_stats([1.23456], digits=1)["p50"] == 1.2


@pytest.mark.parametrize(("samples", "message"), [
    ("12", "expected a list of latencies in ms, got str"),
    (None, "got NoneType"),
    ([1.0, None], r"latency #1 is None"),
    ([1.0, -2.0], r"latency #1 is -2.0"),
    ([True], r"latency #0 is True"),
    ([float("nan")], r"latency #0 is nan"),
    (["3"], r"latency #0 is '3'"),
])
def test_bad_samples(samples, message):
    with pytest.raises(CampaignInputError, match=message):
        latency_stats(samples)
