"""On a failed check, show the unit's journal: the first thing one reads."""

import pytest

UNIT = "vllm-kimi-k25-int4.service"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and "host" in item.funcargs:
        journal = item.funcargs["host"].run(f"journalctl -u {UNIT} -n 40 --no-pager")
        report.sections.append((f"journal of {UNIT}", journal.stdout))
