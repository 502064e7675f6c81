"""The code that runs on the hosts has one home, the collection's ``plugins/module_utils`` (the modules import
it as ``ansible_collections.vllm_ops.serving.plugins.module_utils``, the controller as ``vllm_ops_host``):
no link and no copy of it anywhere; each file parses as the hosts' Python 3.9 and imports only the standard
library and its siblings (by the collection's name), and those the controller reads import only the
standard library."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import vllm_ops_host

REPO = Path(__file__).resolve().parents[3]
SIBLINGS = "ansible_collections.vllm_ops.serving.plugins.module_utils"
HOST = REPO / "plugins" / "module_utils"
# Where the collection's code lives: a link in any of them would be a second home.
TREES = ("plugins", "roles", "playbooks", "src", "molecule", "tests")


def test_the_package_maps_the_collections_module_utils():
    assert Path(vllm_ops_host.__file__).resolve().parent == HOST.resolve()


def test_no_link_in_the_tree():
    links = [str(p.relative_to(REPO)) for tree in TREES for p in (REPO / tree).rglob("*") if p.is_symlink()]
    assert links == []


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), feature_version=(3, 9))  # the hosts' Python
    assert not any(isinstance(node, ast.ImportFrom) and node.level for node in ast.walk(tree)), path
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return imported | {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}


@pytest.mark.parametrize("path", sorted(HOST.glob("*.py")), ids=lambda p: p.name)
def test_it_imports_only_the_standard_library_and_its_siblings(path):
    siblings = {f"{SIBLINGS}.{p.stem}" for p in HOST.glob("*.py")}
    outside = {name for name in _imports(path) if name not in siblings}
    assert {name.split(".")[0] for name in outside} <= set(sys.stdlib_module_names) | {"__future__"}, outside


def test_what_the_controller_reads_imports_only_the_standard_library():
    package = REPO / "src" / "vllm_ops"
    read = {node.module.split(".")[1] for path in package.rglob("*.py")
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vllm_ops_host.")}
    read |= {alias.name for path in package.rglob("*.py") for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.ImportFrom) and node.module == "vllm_ops_host" for alias in node.names}
    assert read == {"checkpoint", "loads", "traffic", "vllm_fabric_lib"}
    for name in read:
        imported = {module.split(".")[0] for module in _imports(HOST / f"{name}.py")}
        assert imported <= set(sys.stdlib_module_names) | {"__future__"}, (name, imported)


def test_the_package_lists_every_subpackage():
    """pyproject.toml lists vllm_ops's packages (a found list cannot hold the mapped vllm_ops_host)."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO / "src").parts) for p in (REPO / "src").rglob("__init__.py")}
    assert listed == found | {"vllm_ops_host"}
