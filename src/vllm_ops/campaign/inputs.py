"""Read and check what the Ansible side leaves in a campaign's directory for the report.

``capture.json`` (:func:`load_capture`, required): what the capture recorded, read through
:class:`vllm_ops.records.CaptureRecord` (its module defines the fields, and reads an earlier release's
file, whose numbers may be strings).

``job.json`` (:func:`load_job`, optional): what the job skeleton recorded after the restore, read
through :class:`vllm_ops.records.JobRecord` (its module defines the fields).

``topology.txt`` (:func:`read_topology`, optional): what ``nvidia-smi topo -m`` printed.

Every problem is a :class:`CampaignInputError` of one line naming the file and the field and saying
what to do.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from .. import artifacts
from ..records import CaptureRecord, JobRecord, RecordError
from ..traces.topology import parse_topology
from .errors import CampaignInputError

__all__ = ["load_capture", "load_job", "read_topology", "trace_files"]

def load_capture(directory: str | os.PathLike) -> dict:
    """``DIR/capture.json`` (:class:`CaptureRecord`), as a dict of its fields; ``samples`` as lists of numbers."""
    try:
        record = CaptureRecord.load(Path(directory) / artifacts.CAPTURE_JSON)
    except RecordError as exc:
        raise CampaignInputError(str(exc)) from None
    out = record.to_dict()
    out.pop("schema")
    return out


def load_job(directory: str | os.PathLike, capture: Mapping) -> dict | None:
    """``DIR/job.json``, checked, or None when there is none (a profiled experiment variant,
    reported while its experiment goes on). It must be the capture's job."""
    path = Path(directory) / artifacts.JOB_JSON
    job = JobRecord.read(directory)
    if job is None:
        return None
    out = job.to_dict()
    out["downtime"] = out["downtime"] or None
    for key in ("id", "host"):
        if out[key] != capture[key]:
            raise CampaignInputError(
                f"{path}: '{key}' is {out[key]!r}, capture.json's is {capture[key]!r}: the two files are of "
                "different jobs; give the campaign's own directory, or remove the stray job.json")
    return out


def read_topology(directory: str | os.PathLike) -> dict:
    """``parse_topology`` of ``DIR/topology.txt``; an absent or empty file: interconnect unknown."""
    path = Path(directory) / artifacts.TOPOLOGY_TXT
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        text = None
    except OSError as exc:
        raise CampaignInputError(f"{path}: {exc.strerror or exc}; make it readable or remove it") from None
    return parse_topology(text)


def trace_files(directory: str | os.PathLike, capture: Mapping) -> list[str]:
    """The paths of the capture's traces in ``directory``, sorted as a directory listing is; each
    trace ``capture.json`` lists must be there."""
    files = []
    for t in capture["traces"]:
        path = os.path.join(os.fspath(directory), os.path.basename(t["file"]))
        if not os.path.isfile(path):
            raise CampaignInputError(
                f"{path}: rank {t['rank']}'s trace, listed in capture.json, is missing; fetch the traces again "
                "(re-run the campaign)")
        files.append(path)
    return sorted(files)
