"""The watch's configuration: written by plugins/modules/vllm_watch_config.py (run as Ansible runs a module)
from the role's values, read by the watch, both through plugins/module_utils/watch_config.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

import run_module
from watch_installed import watch as w

REPO = Path(__file__).resolve().parents[3]


def run(tmp_path: Path, **args) -> dict:
    return run_module.run("vllm_watch_config", tmp_path, **args)


def test_the_settings_are_what_the_watch_reads_and_the_role_passes_only_those(tmp_path):
    source = (REPO / "roles/vllm/files/vllm_ops_watch.py").read_text()
    read = set(re.findall(r"cfg\[\"(\w+)\"\]", source)) | set(re.findall(r"cfg\.get\(\"(\w+)\"", source))
    answer = run(tmp_path, path=str(tmp_path / "watch.json"), settings={})
    assert set(answer["config"]) - {"schema"} == read
    passed = yaml.safe_load((REPO / "roles/vllm/vars/main.yml").read_text())["__vllm_watch_settings"]
    assert set(passed) < read


def test_the_file_holds_every_setting_with_the_values_given_and_the_watch_reads_them(tmp_path):
    path = tmp_path / "watch.json"
    answer = run(tmp_path, path=str(path), mode="0644",
                 settings={"unit": "vllm-kimi.service", "stall_s": 0, "max_restarts": 2, "auto_capture": True,
                           "environment_files": ["/etc/a", "/etc/b"]})
    assert answer["changed"] is True and "failed" not in answer
    on_disk = json.loads(path.read_text())
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    # the given values, as given (a whole number where a number is asked for is a number) ...
    assert (on_disk["unit"], on_disk["stall_s"], on_disk["max_restarts"]) == ("vllm-kimi.service", 0.0, 2)
    assert on_disk["auto_capture"] is True and on_disk["environment_files"] == ["/etc/a", "/etc/b"]
    assert isinstance(on_disk["stall_s"], float)
    # ... and the others at the watch's own defaults, as the watch's poll rate was before the module: 5 s
    assert (on_disk["interval_s"], on_disk["url"], on_disk["keep"]) == (5.0, "http://127.0.0.1:8000", 20)
    assert on_disk["schema"] == "vllm-ops/watch-config/1" and answer["config"] == on_disk
    assert w.watch_config.load(path) == {k: v for k, v in on_disk.items() if k != "schema"}
    # the same again changes nothing; another value changes the file, and check mode says so, writing nothing
    again = run(tmp_path, path=str(path), mode="0644", settings={"unit": "vllm-kimi.service", "stall_s": 0,
                "max_restarts": 2, "auto_capture": True, "environment_files": ["/etc/a", "/etc/b"]})
    assert again["changed"] is False
    before = path.read_text()
    checked = run(tmp_path, check_mode=True, diff=True, path=str(path), settings={"unit": "other.service"})
    assert checked["changed"] is True and path.read_text() == before
    assert '"unit": "other.service"' in checked["diff"]["after"]
    assert '"unit": "vllm-kimi.service"' in checked["diff"]["before"]


def test_a_setting_the_watch_lacks_or_a_value_of_the_wrong_type_fails_naming_each_and_writes_nothing(tmp_path):
    path = tmp_path / "watch.json"
    answer = run(tmp_path, path=str(path), settings={"stal_s": 30, "max_restarts": "3", "armed": "yes",
                                                     "interval_s": True, "environment_files": ["/etc/a", 1]})
    assert answer["failed"] and not path.exists()
    message = answer["msg"]
    assert "'stal_s' is no setting of the watch" in message and "stall_s" in message
    assert "max_restarts is '3': it must be a whole number" in message
    assert "armed is 'yes': it must be true or false" in message
    assert "interval_s is True: it must be a number" in message
    assert "environment_files is ['/etc/a', 1]: it must be a list of texts" in message


def test_the_watch_refuses_a_missing_or_broken_configuration_and_says_what_writes_it(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        w.main(["--config", str(tmp_path / "absent.json")])
    assert exited.value.code == 2
    assert f"{tmp_path / 'absent.json'}: no such file; the vllm role" in capsys.readouterr().err
    broken = tmp_path / "watch.json"
    broken.write_text(json.dumps({"incidents_dir": str(tmp_path), "unit": 7}))
    with pytest.raises(SystemExit):
        w.main(["--config", str(broken)])
    assert "unit is 7: it must be a text" in capsys.readouterr().err
    broken.write_text(json.dumps({"schema": "vllm-ops/watch-config/2"}))
    with pytest.raises(SystemExit):
        w.main(["--config", str(broken)])
    assert "deploy the watch and its configuration from one release" in capsys.readouterr().err
