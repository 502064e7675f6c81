"""Controller-side reporting of a profiling campaign (issue 5).

Public API::

    from vllm_ops.campaign import headline, latency_stats, history_row, append_history, write_chart
    print(headline("vllm-sandbox", summary, "artifacts/vllm-sandbox/c1/report.md"))

``figures`` defines the headline numbers (mean over ranks; share = ratio of the means),
``history`` the CSV columns, ``latency`` the TTFT/TPOT statistics, ``chart`` the PNG and
``cli`` the ``vllm-campaign-report`` command.
"""

from .chart import write_chart
from .errors import CampaignInputError
from .figures import decode_figures, headline
from .history import COLUMN_DOCS, COLUMNS, append_history, history_row
from .latency import latency_stats

__all__ = [
    "COLUMNS", "COLUMN_DOCS", "CampaignInputError", "append_history", "decode_figures", "headline",
    "history_row", "latency_stats", "write_chart",
]
