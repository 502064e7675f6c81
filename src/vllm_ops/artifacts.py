"""The controller's artifacts: where a job's files lie, their names, and how they are written.

Layout (``vllm_job_artifacts_dir``, every job's, ``<repo>/artifacts`` by default)::

    artifacts/<host>/history.csv                 one row per campaign (vllm_ops.campaign.history)
    artifacts/<host>/experiments.csv             one row per experiment variant and concurrency
    artifacts/<host>/<job id>/                   one job's directory (ids: vllm_ops.job.ID_FORMAT); a campaign's:
        *.pt.trace.json.gz, *profiler_out*       the traces, one per rank, and vLLM's tables
        capture.json, job.json, topology.txt     what the Ansible side recorded
        summary.json, campaign.json, decode.png, steps.png, report.md   what the report wrote
        allreduce/allreduce-unit.json, ...       the all-reduce floor, when the job measured one
    (an experiment's holds experiment.json, bench/ and report.json, report.md, throughput.png, tpot.png;
    its profiled variants' captures lie in profile/<slot>/, each laid out as a campaign's directory;
    a rollout's canary holds experiment.json, bench/ and gate.json, each host's job.json)
    artifacts/rollout/<rollout id>/              a rollout: hosts/<host>.json, report.json, report.md

Every file a report writes is written atomically (:func:`atomic_path`: a temporary file beside
the target, then a rename), so a reader never sees half a file and an interrupted report leaves
the previous version whole; the file gets the mode a plain write would give it (0666 less the
umask), not the temporary file's 0600, so that whoever reads the artifacts can read it.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "CAMPAIGN_JSON", "CAPTURE_JSON", "DECODE_PNG", "JOB_JSON", "LEDGER_PNG", "REPORT_MD", "STEPS_PNG", "SUMMARY_JSON",
    "TOPOLOGY_TXT", "atomic_path", "find_newest", "nice_json", "write_json", "write_text",
]

CAPTURE_JSON = "capture.json"
JOB_JSON = "job.json"
TOPOLOGY_TXT = "topology.txt"
SUMMARY_JSON = "summary.json"
CAMPAIGN_JSON = "campaign.json"
DECODE_PNG = "decode.png"
STEPS_PNG = "steps.png"
LEDGER_PNG = "ledger.png"
REPORT_MD = "report.md"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, suffix: str = "") -> Iterator[str]:
    """A temporary path beside ``path`` (parents created) to write to; renamed to ``path`` when the
    block ends without an error, removed when it raises."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp's 0600 would hide the artifact from its readers
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    """The process's umask (read by setting it, then putting it back: the commands are single-threaded)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    return Path(path)


def nice_json(data: object) -> str:
    """JSON as the playbooks have written it (Ansible's ``to_nice_json``: keys sorted, four spaces),
    with a final newline."""
    return json.dumps(data, indent=4, sort_keys=True, separators=(",", ": ")) + "\n"


def write_json(path: str | os.PathLike, data: object) -> Path:
    """Write :func:`nice_json` of ``data`` to ``path`` atomically."""
    return write_text(path, nice_json(data))


def find_newest(under: str | os.PathLike, name: str, depth: int = 3) -> str | None:
    """The last, by sorted path, of the regular files called ``name`` at most ``depth`` levels below
    ``under`` (``under/name`` is level 1); None when there is none or ``under`` is no directory.

    The search ``ansible.builtin.find`` does with ``recurse: true`` and ``depth``: symbolic links
    are neither followed nor found; paths are ``under`` joined with what lies below it, normalized.
    Job directories are named by their start time, so the last path is the newest job's."""
    top = os.fspath(under)
    if not os.path.isdir(top):
        return None
    found = []
    for root, dirs, files in os.walk(top):
        below = os.path.relpath(root, top)
        level = 1 if below == os.curdir else below.count(os.sep) + 2  # of the files in root
        if level >= depth:
            dirs[:] = []  # their files would lie deeper than depth
        for f in files:
            path = os.path.normpath(os.path.join(root, f))
            if f == name and os.path.isfile(path) and not os.path.islink(path):
                found.append(path)
    return sorted(found)[-1] if found else None
