"""The JSON records the jobs keep, one module a record, each read and written only through its module.

Each record is a typed class with ``load`` (a file, checked, an older release's migrated), ``dump``
(written atomically with its schema version) and, where the Ansible side hands it values, a command
that writes it (``python -m vllm_ops.records write RECORD DIR``): the roles pass values, never
the record's shape. So far: :mod:`.job` (``job.json``, the job skeleton's record of every job),
:mod:`.capture` (``capture.json``, what a profiling capture recorded beside its traces),
:mod:`.incident` (``incident.json``, one of the watch's incidents, written on the host by the watch),
:mod:`.experiment` (``experiment.json``, one host's benchmark of a baseline and its variants, kept by
the experiment, the tune and the rollout's canary), :mod:`.tune` (``tune.json``, one host's tune) and
:mod:`.rollout_host` (a rollout's ``hosts/<host>.json``) and :mod:`.summary` (``summary.json``, a trace
summary, written by the campaign's report, the watch's incidents and ``vllm-trace-summary``); :mod:`.base`
holds what they share.
"""

from .capture import CaptureRecord
from .errors import RecordError
from .experiment import ExperimentRecord
from .incident import IncidentRecord
from .job import JobRecord
from .rollout_host import RolloutHostRecord
from .summary import SummaryRecord
from .tune import TuneRecord

__all__ = ["CaptureRecord", "ExperimentRecord", "IncidentRecord", "JobRecord", "RecordError", "RolloutHostRecord",
           "SummaryRecord", "TuneRecord"]
