"""``python -m vllm_ops.records write RECORD DIR``: a job's record written from the values the role hands it
(a JSON object on stdin), checked as that record's module defines it. The roles call it; see
:func:`vllm_ops.records.base.write_main`."""

import sys

from . import CaptureRecord, ExperimentRecord, JobRecord, RolloutHostRecord, TuneRecord
from .base import write_main

RECORDS = {"capture": CaptureRecord, "job": JobRecord, "experiment": ExperimentRecord, "tune": TuneRecord,
           "rollout-host": RolloutHostRecord}

if __name__ == "__main__":
    sys.exit(write_main(sys.argv[1:], RECORDS))
