"""The vLLM stand-in as a package: its layers, its standard-library-only imports, and the
installed form (prepare.yml's copy of the launcher and the modules) starting its whole tree."""

import ast
import glob
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from standin_support import STANDIN_DIR, STANDIN_LIB, WAIT_S, cmdline

PACKAGE = STANDIN_LIB / "vllm_standin"
# The layers README.md and the package docstring state, written out here.
PROGRAMS = {"api_server", "engine", "worker", "bench", "allreduce_bench"}
API_PARTS = {"handler", "generation", "metrics"}  # the API server's own modules
SHARED = {"knobs", "logs", "processes", "config", "serve_options", "traces", "vocab", "nccl"}
EXPECTED_MODULES = {"__init__", "__main__", "cli", *PROGRAMS, *API_PARTS, *SHARED}


def package_imports(name):
    """The vllm_standin modules that module ``name`` imports (``vllm_standin`` itself as
    ``__init__``), and every top-level module name it imports."""
    tree = ast.parse((PACKAGE / f"{name}.py").read_text())
    own, top = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module] if node.level == 0 else []
            assert node.level == 0, f"{name}: relative import (the launcher imports absolutely)"
        else:
            continue
        for dotted in names:
            top.add(dotted.split(".")[0])
            if dotted == "vllm_standin":
                own.add("__init__")
            elif dotted.startswith("vllm_standin."):
                own.add(dotted.split(".")[1])
    return own, top


def test_one_flat_package_of_the_expected_modules():
    # prepare.yml copies lib/vllm_standin/*.py: a sub-package would not be installed.
    assert {path.stem for path in PACKAGE.glob("*.py")} == EXPECTED_MODULES
    assert not [path for path in PACKAGE.rglob("*.py") if path.parent != PACKAGE]


@pytest.mark.parametrize("name", sorted(EXPECTED_MODULES))
def test_standard_library_only(name):
    _, top = package_imports(name)
    assert top - {"vllm_standin"} <= set(sys.stdlib_module_names), top


@pytest.mark.parametrize("name", sorted(EXPECTED_MODULES - {"cli", "__main__"}))
def test_layers(name):
    own, _ = package_imports(name)
    assert "cli" not in own
    if name in PROGRAMS:
        assert not own & (PROGRAMS - {name}), f"{name} imports another program: {own}"
        if name != "api_server":
            assert not own & API_PARTS, f"{name} imports the API server's parts: {own}"
    elif name in API_PARTS:
        assert not own & PROGRAMS, own
    else:
        assert not own & (PROGRAMS | API_PARTS), f"shared module {name} imports {own}"


@pytest.fixture
def installed(tmp_path):
    """The stand-in's tree as prepare.yml installs it: bin/vllm (0755) and the modules that
    its glob (lib/vllm_standin/*.py) selects, nothing else (no __pycache__)."""
    prefix = tmp_path / "opt" / "vllm-standin"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "lib" / "vllm_standin").mkdir(parents=True)
    shutil.copy(STANDIN_DIR / "bin" / "vllm", prefix / "bin" / "vllm")
    (prefix / "bin" / "vllm").chmod(0o755)
    for module in glob.glob(str(STANDIN_DIR / "lib" / "vllm_standin" / "*.py")):
        shutil.copy(module, prefix / "lib" / "vllm_standin")
    return prefix


def test_the_installed_launcher_runs_by_its_shebang_and_writes_no_bytecode(installed):
    done = subprocess.run([str(installed / "bin" / "vllm"), "--version"],
                          capture_output=True, text=True, timeout=WAIT_S)
    assert (done.returncode, done.stdout) == (0, "0.32.0\n"), done.stderr
    assert not list(installed.rglob("__pycache__"))
    usage = subprocess.run([str(installed / "bin" / "vllm"), "chat"],
                           capture_output=True, text=True, timeout=WAIT_S)
    assert usage.returncode == 2 and "usage: vllm serve MODEL" in usage.stderr


def full_cmdline(pid):
    return Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode().split("\0")


def test_the_installed_launcher_re_executes_itself_for_engine_and_workers(installed, server):
    launcher = str(installed / "bin" / "vllm")
    server.start(tp=2, command=[launcher])
    server.wait_ready()
    engine, workers = server.tree()
    assert full_cmdline(server.proc.pid)[1:3] == [launcher, "serve"]
    title, entry, role, fd = full_cmdline(engine)
    assert (title, entry, role, fd.isdigit()) == ("VLLM::EngineCore", launcher, "--internal-engine", True)
    for rank, pid in enumerate(workers):
        title, entry, role, fd = full_cmdline(pid)
        assert (title, entry, role, fd.isdigit()) == (f"VLLM::Worker_TP{rank}", launcher, "--internal-worker", True)
    assert server.get("/health").status_code == 200


def test_python_m_vllm_standin_starts_the_same_tree(server):
    main = str(PACKAGE / "__main__.py")
    server.start(tp=2, command=[sys.executable, "-m", "vllm_standin"],
                 env={"PYTHONPATH": str(STANDIN_LIB)})
    server.wait_ready()
    engine, workers = server.tree()
    assert full_cmdline(engine)[:3] == ["VLLM::EngineCore", main, "--internal-engine"]
    assert [cmdline(pid) for pid in workers] == ["VLLM::Worker_TP0", "VLLM::Worker_TP1"]
    assert [full_cmdline(pid)[1] for pid in workers] == [main, main]
    assert server.get("/health").status_code == 200


def test_a_release_json_makes_the_installed_tree_another_release(installed, server):
    # How the rollout scenario installs the stand-in as several releases side by side.
    (installed / "release.json").write_text(json.dumps({"version": "0.33.0", "removed_args": ["--reasoning-parser"]}))
    launcher = str(installed / "bin" / "vllm")
    done = subprocess.run([launcher, "--version"], capture_output=True, text=True, timeout=WAIT_S)
    assert done.stdout == "0.33.0\n"
    helped = subprocess.run([launcher, "serve", "--help=all"], capture_output=True, text=True, timeout=WAIT_S)
    assert helped.returncode == 0
    lines = helped.stdout.splitlines()
    assert "  --tensor-parallel-size, -tp" in lines and "  --reasoning-parser" not in lines
    assert "https://docs.vllm.ai/en/v0.33.0/api/vllm/config/" in helped.stdout
    refused = subprocess.run([launcher, "serve", str(installed), "--reasoning-parser", "kimi_k2"],
                             capture_output=True, text=True, timeout=WAIT_S)
    assert refused.returncode == 2
    assert "vllm serve: error: unrecognized arguments: --reasoning-parser kimi_k2" in refused.stderr
    server.start("--tool-call-parser", "kimi_k2", command=[launcher])
    server.wait_ready()
    assert server.get("/version").json() == {"version": "0.33.0"}
