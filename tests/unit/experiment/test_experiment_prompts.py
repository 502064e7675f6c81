"""A prompts file for the benchmark's custom dataset: refused before a load, naming the line."""

from __future__ import annotations

import json

import pytest

from vllm_ops.experiment.cli import main
from vllm_ops.experiment.errors import ExperimentInputError
from vllm_ops.experiment.prompts import check_prompts


def test_a_jsonl_of_prompts_is_counted(tmp_path, capsys):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "def add(a, b):", "output_tokens": 9}\n\n{"prompt": "two words"}\n')
    assert check_prompts(path) == {"path": str(path), "prompts": 2, "words": 5}
    assert main(["prompts", str(path)]) == 0
    assert json.loads(capsys.readouterr().out) == {"path": str(path), "prompts": 2, "words": 5}


@pytest.mark.parametrize(("name", "text", "words"), [
    ("p.json", '{"prompt": "x"}\n', "reads only a .jsonl file"),
    ("p.jsonl", '{"prompt": "x"}\n{"prompt": \n', "line 2: not JSON"),
    ("p.jsonl", '{"text": "x"}\n', 'line 1: each line needs a non-empty string "prompt"'),
    ("p.jsonl", '["x"]\n', 'line 1: each line needs a non-empty string "prompt"'),
    ("p.jsonl", "\n\n", "has no prompt"),
])
def test_a_file_vllm_would_refuse_is_refused_naming_why(tmp_path, capsys, name, text, words):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ExperimentInputError, match=words.replace("(", r"\(")):
        check_prompts(path)
    assert main(["prompts", str(path)]) == 2
    assert words in capsys.readouterr().err


def test_a_missing_file_is_said(tmp_path):
    with pytest.raises(ExperimentInputError, match="No such file"):
        check_prompts(tmp_path / "none.jsonl")
