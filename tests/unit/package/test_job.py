"""vllm_ops.job: a job's times, its duration in words and its downtime in words."""

import pytest

from vllm_ops.errors import VllmOpsError
from vllm_ops.job import JobInputError, downtime_text, duration, iso_utc


@pytest.mark.parametrize(("start", "end", "words"), [
    ("2025-01-31T12:00:00Z", "2025-01-31T12:14:07Z", "14 min 7 s"),
    ("2025-01-31T12:00:00+00:00", "2025-01-31T13:00:07+00:00", "1 h 0 min 7 s"),
    ("2025-01-31T13:00:00+01:00", "2025-01-31T12:00:42Z", "42 s"),
    (1738324800, "1738324805.4", "5 s"),
])
def test_duration(start, end, words):
    assert duration(start, end) == words


@pytest.mark.parametrize(("start", "end", "message"), [
    ("2025-01-31T12:00:00", "2025-01-31T12:00:01Z", "started_at: .* has no time zone"),
    ("2025-01-31T12:00:09Z", "2025-01-31T12:00:01Z", "is before started_at"),
    ("yesterday", "2025-01-31T12:00:01Z", "not an ISO 8601 time"),
    (None, "2025-01-31T12:00:01Z", "expected an ISO 8601 time"),
])
def test_bad_duration(start, end, message):
    with pytest.raises(JobInputError, match=message):
        duration(start, end)


def test_iso_utc():
    assert iso_utc("2025-01-31T13:00:00.123+01:00") == "2025-01-31T12:00:00Z"


@pytest.mark.parametrize(("record", "words"), [
    (None, None),
    ({}, None),
    ({"seconds_not_ready": 0, "gaps": 0}, "downtime 0 s"),
    ({"seconds_not_ready": 9.14, "gaps": 1, "longest_gap_s": 9.14}, "downtime 9.1 s in 1 gap"),
    ({"seconds_not_ready": 17.25, "gaps": 2, "longest_gap_s": 9.14}, "downtime 17.2 s in 2 gaps (longest 9.1 s)"),
])
def test_downtime_in_words(record, words):
    assert downtime_text(record) == words


def test_a_broken_downtime_record_is_refused():
    with pytest.raises(JobInputError, match="a downtime record needs seconds_not_ready and gaps"):
        downtime_text({"gaps": "x"})
    assert issubclass(JobInputError, VllmOpsError) and issubclass(JobInputError, ValueError)
