"""The lookup the artifacts' default is made of: where ansible-playbook runs, not an inherited PWD."""

from __future__ import annotations

import os

from ansible_collections.vllm_ops.serving.plugins.lookup.controller_cwd import LookupModule


def test_the_lookup_is_the_working_directory_whatever_pwd_says(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PWD", "/somewhere/else")  # what a process started elsewhere inherits
    assert LookupModule().run([]) == [os.fspath(tmp_path)]
