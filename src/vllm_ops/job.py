"""What every job that stops the service records about itself: its id, its times, its downtime.

A job (a profiling campaign, an experiment, an all-reduce benchmark) is named by its id, the UTC
time it started as ``YYYYMMDDTHHMMSSZ`` (:data:`ID_FORMAT`, what the Ansible side writes with
``now(utc=true, fmt=...)``), and records its times as ISO 8601 UTC, ``YYYY-MM-DDTHH:MM:SSZ``
(:data:`TIME_FORMAT`). Its downtime is the health poller's record
(``roles/vllm_campaign/files/health_poller.py``): ``{seconds_not_ready, gaps, longest_gap_s, polls,
failed_polls, interval_s, gap_list}``, put in words by :func:`downtime_text`, the same words in
the campaign's headline and report, an experiment's report and the job's failure messages.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from numbers import Real

from .errors import VllmOpsError

__all__ = ["ID_FORMAT", "TIME_FORMAT", "JobInputError", "downtime_text", "duration", "duration_words",
           "iso_utc", "now_iso", "parse_time"]

ID_FORMAT = "%Y%m%dT%H%M%SZ"
TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class JobInputError(VllmOpsError):
    """A job's time or downtime record that cannot be read; the message names the field."""


def parse_time(value: object, what: str = "time") -> datetime:
    """An ISO 8601 time with a zone (``...Z`` or ``+00:00``) or a Unix epoch -> aware UTC datetime."""
    if isinstance(value, datetime):
        when = value
    elif isinstance(value, Real) and not isinstance(value, bool):
        when = datetime.fromtimestamp(float(value), tz=UTC)
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            try:
                when = datetime.fromtimestamp(float(text), tz=UTC)
            except (ValueError, OverflowError):
                raise JobInputError(f"{what}: not an ISO 8601 time or epoch: {value!r}") from None
    else:
        raise JobInputError(f"{what}: expected an ISO 8601 time or epoch seconds, got {value!r}")
    if when.tzinfo is None:
        raise JobInputError(f"{what}: {value!r} has no time zone; give UTC, e.g. 2025-01-31T12:00:00Z")
    return when.astimezone(UTC)


def iso_utc(value: object, what: str = "time") -> str:
    """Any time :func:`parse_time` accepts -> ``YYYY-MM-DDTHH:MM:SSZ``."""
    return parse_time(value, what).strftime(TIME_FORMAT)


def now_iso() -> str:
    """Now, as a job records its times."""
    return datetime.now(UTC).strftime(TIME_FORMAT)


def duration_words(seconds: float) -> str:
    """Seconds in words, rounded to the second: ``"42 s"``, ``"12 min 5 s"``, ``"1 h 0 min 7 s"``."""
    total = round(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    parts = ([f"{hours} h"] if hours else []) + ([f"{minutes} min"] if hours or minutes else []) + [f"{secs} s"]
    return " ".join(parts)


def duration(started_at: object, finished_at: object) -> str:
    """How long a job took, in words (:func:`duration_words`); refuses a finish before the start."""
    seconds = (parse_time(finished_at, "finished_at") - parse_time(started_at, "started_at")).total_seconds()
    if seconds < 0:
        raise JobInputError(f"finished_at ({finished_at}) is before started_at ({started_at})")
    return duration_words(seconds)


def downtime_text(downtime: Mapping | None) -> str | None:
    """``downtime 0 s`` or ``downtime 17.2 s in 2 gaps (longest 9.1 s)`` from a health poller
    record; None without one."""
    if not downtime:
        return None
    try:
        seconds, gaps = float(downtime["seconds_not_ready"]), int(downtime["gaps"])
        longest = float(downtime.get("longest_gap_s") or 0)
    except (KeyError, TypeError, ValueError):
        raise JobInputError(f"a downtime record needs seconds_not_ready and gaps, got {downtime!r}") from None
    if not gaps:
        return "downtime 0 s"
    return (f"downtime {seconds:.1f} s in {gaps} gap{'s' if gaps != 1 else ''}"
            + (f" (longest {longest:.1f} s)" if gaps > 1 else ""))
