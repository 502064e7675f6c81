"""The one error base class of the package.

Every front end's input error derives from :class:`VllmOpsError`: ``TraceInputError``
(``vllm_ops.traces``), ``AllreduceInputError`` (``vllm_ops.allreduce``), ``JobInputError``
(``vllm_ops.job``), ``CampaignInputError`` (``vllm_ops.campaign``), ``ExperimentInputError``
(``vllm_ops.experiment``) and ``LedgerInputError`` (``vllm_ops.ledger``). The one module outside it
is ``vllm_ops_host.checkpoint``, which the hosts import too and which therefore imports nothing of the
package: its ``CheckpointError`` becomes a ``LedgerInputError`` at ``vllm_ops.ledger.load_checkpoint``.
A command catches the base class, so an error raised by a layer below it (a floor file, a job's
times) ends as one line on stderr and exit status 2 like its own.
It derives from ValueError, as each of those classes did before it existed.
"""


class VllmOpsError(ValueError):
    """Bad input: the message is one line naming the file or field, what was wrong and what to do."""
