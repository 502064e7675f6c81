"""The package's files that hosts run too: each role's module_utils entry is a relative link to the
package's one file (no copy to drift), and that file imports only the standard library and parses as
the hosts' Python 3.9 (nothing else of vllm_ops reaches a host)."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
# The package file -> the roles' links to it.
HOST_COPIES = {
    "src/vllm_ops/loads.py": ["roles/vllm/module_utils/vllm_ops_loads.py",
                              "roles/vllm_disk/module_utils/vllm_ops_loads.py"],
    "src/vllm_ops/checkpoint.py": ["roles/vllm_capture/module_utils/vllm_ops_checkpoint.py"],
}


def test_every_link_in_the_roles_is_named_here():
    links = {str(p.relative_to(REPO)) for p in REPO.glob("roles/*/module_utils/*") if p.is_symlink()}
    assert links == {link for named in HOST_COPIES.values() for link in named}


@pytest.mark.parametrize("source", sorted(HOST_COPIES))
def test_the_host_copies_are_this_file_and_it_imports_only_the_standard_library(source):
    path = REPO / source
    for link in (REPO / name for name in HOST_COPIES[source]):
        assert link.is_symlink() and not os.path.isabs(os.readlink(link))
        assert link.resolve() == path.resolve()
    tree = ast.parse(path.read_text(), feature_version=(3, 9))  # the hosts' Python
    imported = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
    assert not any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree))
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported
