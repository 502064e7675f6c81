"""One error base class: every front end's input error is a VllmOpsError (and a ValueError), and a
command turns one raised by any layer into one line on stderr and exit status 2."""

import pytest

from vllm_ops.allreduce import AllreduceInputError
from vllm_ops.campaign import CampaignInputError
from vllm_ops.cliutil import run_command
from vllm_ops.errors import VllmOpsError
from vllm_ops.experiment import ExperimentInputError
from vllm_ops.job import JobInputError
from vllm_ops.ledger import LedgerInputError
from vllm_ops.traces import TraceInputError


@pytest.mark.parametrize("error", [TraceInputError, CampaignInputError, ExperimentInputError, AllreduceInputError,
                                   JobInputError, LedgerInputError])
def test_each_input_error_derives_from_the_base(error, capsys):
    assert issubclass(error, VllmOpsError) and issubclass(error, ValueError)

    def fail():
        raise error("x.json: 'field' is wrong; fix it")

    assert run_command("prog", fail) == 2
    assert capsys.readouterr().err == "prog: error: x.json: 'field' is wrong; fix it\n"


def test_other_errors_are_not_swallowed():
    def fail():
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        run_command("prog", fail)
