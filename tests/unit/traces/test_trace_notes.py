"""The analyzers' notes and their words: every note an analyzer makes has words and every word a note,
the warnings come in the order a reader needs them, and the options are checked before any file is read."""

import ast
from pathlib import Path

import pytest

from vllm_ops.traces import SummaryOptions, TraceInputError, summarize
from vllm_ops.traces.notes import Note, note
from vllm_ops.traces.words import WORDS, warnings

TRACES = Path(__file__).resolve().parents[3] / "src" / "vllm_ops" / "traces"


def _codes_made() -> set[str]:
    """The codes of every ``note("code", ...)`` call in the package's source, read from the source."""
    codes = set()
    for path in TRACES.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "note"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                codes.add(node.args[0].value)
    return codes


def test_every_note_an_analyzer_makes_has_words_and_every_word_a_note():
    made = _codes_made()
    assert len(made) > 25  # the scan found the analyzers' notes
    assert made - set(WORDS) == set(), "notes without words"
    assert set(WORDS) - made == set(), "words no analyzer uses"


def test_the_warnings_come_front_then_missing_then_fabric_then_the_rest_each_in_the_order_found():
    made = [note("tp_differs", given=4, world=8),
            note("profiler_steps", "front", withheld=None),
            note("one_rank_skew"),
            note("ranks_missing", "missing", coverage={"world_size": 2, "missing": [1], "present": [0],
                                                       "fetch": [{"rank": 1, "glob": "*rank1.*"}]}),
            note("left_out", rank=None, index=0, reason="first step")]
    said = warnings(made)
    assert [w.split(" ")[0] for w in said] == ["no", "world_size", "tensor-parallel", "only", "steady"]
    assert said[4] == "steady state: decode step 0 left out of the steady figures: first step."
    assert said[2] == ("tensor-parallel size 4 given, the traces' world size is 8: taken as given (pipeline or data "
                       "parallel ranks?).")


def test_a_note_without_words_or_of_no_section_is_refused():
    with pytest.raises(ValueError, match="no words for a note of code 'nonsense'"):
        warnings([note("nonsense")])
    with pytest.raises(ValueError, match="section 'middle'"):
        Note("tp_differs", {}, "middle")


@pytest.mark.parametrize(("options", "message"), [
    (SummaryOptions(top=-1), "top must be a non-negative integer, got -1"),
    (SummaryOptions(jobs=0), "jobs must be a positive integer, got 0"),
    (SummaryOptions(decode_pattern="("), "decode_pattern: invalid regular expression '('"),
    (SummaryOptions(tokens=True), "tokens must be a non-negative integer, got True"),
    (SummaryOptions(fabric=["a link"]), "fabric: expected vllm_ops.fabric.findings' list of findings"),
])
def test_the_options_are_refused_before_any_file_is_read(tmp_path, options, message):
    missing = tmp_path / "no such trace.json"  # never read: the options are checked first
    with pytest.raises(TraceInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        summarize([str(missing)], options)
