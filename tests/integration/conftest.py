"""A sandbox host for integration tests: one container for the session.

The container is made the way `make sandbox` makes one (sandbox.sh, then
molecule/resources/prepare.yml) and deployed with playbooks/deploy.yml;
each test then drives the real playbooks against it and looks at the
host as an operator would.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAME = os.environ.get("VLLM_OPS_IT_SANDBOX", "vllm-it")
PORT = int(os.environ.get("VLLM_OPS_IT_PORT", "2241"))
# The stand-in's load here, instead of the sandbox's 8 s: no test of this suite depends on its length.
LOAD_S = 3
UNIT = "vllm-kimi-k25-int4"
RECAP = re.compile(r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)"
                   r"\s+unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)", re.M)


@dataclass
class Run:
    rc: int
    output: str

    def recap(self) -> dict[str, dict[str, int]]:
        return {m["host"]: {k: int(v) for k, v in m.groupdict().items() if k != "host"}
                for m in RECAP.finditer(self.output)}


class Sandbox:
    def __init__(self, inventory: Path):
        self.inventory = inventory
        self.name = NAME

    def playbook(self, playbook: str, *args: str, extra: dict | None = None) -> Run:
        cmd = [str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(self.inventory), str(ROOT / playbook), *args]
        if extra:
            cmd += ["-e", json.dumps(extra)]
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
        proc = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        sys.stdout.write(proc.stdout[-6000:])
        return Run(proc.returncode, proc.stdout)

    def sh(self, command: str, check: bool = True) -> str:
        proc = subprocess.run(["podman", "exec", self.name, "bash", "-c", command], capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise AssertionError(f"{command!r} failed in {self.name}: {proc.stderr}")
        return proc.stdout.strip()

    def http(self, path: str, method: str = "GET", headers: tuple[str, ...] = ()) -> int:
        header_args = " ".join(f"-H '{h}'" for h in headers)
        out = self.sh(
            f"curl -s -o /dev/null -w '%{{http_code}}' -X {method} {header_args} http://127.0.0.1:8000{path} || true"
        )
        return int(out or 0)

    def prop(self, name: str) -> str:
        return self.sh(f"systemctl show {UNIT} -p {name} --value")

    def file_sum(self, path: str) -> str:
        return self.sh(f"sha256sum {path} 2>/dev/null | cut -c1-64 || true", check=False)


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory):
    if shutil.which("podman") is None:
        pytest.fail("podman is missing: run `make setup` first")
    inventory = tmp_path_factory.mktemp("inventory")
    (inventory / "hosts.yml").write_text(
        json.dumps(
            {
                "vllm_servers": {
                    "hosts": {
                        NAME: {
                            "ansible_host": "127.0.0.1",
                            "ansible_port": PORT,
                            "ansible_user": "ops",
                            "ansible_ssh_private_key_file": str(ROOT / ".sandbox/id_ed25519"),
                            "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
                            "ansible_host_key_checking": False,
                            "sandbox_standin_load_s": LOAD_S,
                        }
                    }
                }
            }
        )
    )
    (inventory / "group_vars").symlink_to(ROOT / "inventory/sandbox/group_vars")
    subprocess.run([str(ROOT / "molecule/resources/sandbox.sh"), "down", NAME], check=True, capture_output=True)
    subprocess.run([str(ROOT / "molecule/resources/sandbox.sh"), "up", NAME, str(PORT)], check=True)
    box = Sandbox(inventory / "hosts.yml")
    try:
        for playbook in ("molecule/resources/prepare.yml", "playbooks/deploy.yml"):
            run = box.playbook(playbook)
            assert run.rc == 0, f"{playbook} failed while setting up the sandbox"
        yield box
    finally:
        if not os.environ.get("VLLM_OPS_IT_KEEP"):
            subprocess.run([str(ROOT / "molecule/resources/sandbox.sh"), "down", NAME], capture_output=True)
