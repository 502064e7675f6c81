"""tests/check_roles.py (make lint): what it refuses, on small role trees built here."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from check_roles import check


def role(root: Path, name: str, entries: tuple[str, ...], **tasks) -> None:
    base = root / "roles" / name
    (base / "meta").mkdir(parents=True)
    (base / "tasks").mkdir()
    specs = {entry: {"short_description": entry, "options": {}} for entry in entries}
    (base / "meta/argument_specs.yml").write_text(yaml.safe_dump({"argument_specs": specs}))
    for file, body in tasks.items():
        (base / "tasks" / f"{file}.yml").write_text(yaml.safe_dump(body))


def include(name: str, tasks_from: str | None = None, *, short: bool = False, **extra) -> dict:
    """An include of role ``name``, called by its fully qualified name unless ``short`` (or a template)."""
    called = name if short or "{{" in name else f"vllm_ops.serving.{name}"
    args = {"name": called, **({"tasks_from": tasks_from} if tasks_from else {})}
    return {"name": f"Include {name}", "ansible.builtin.include_role": args, **extra}


SKELETON_ENTRIES = ("main", "preflight", "begin", "open", "failed", "end", "finish")


def job_play(job: str, *, order: tuple[str, ...] | None = None) -> list[dict]:
    """A job's playbook: the skeleton's steps and the job's, in the order a job runs them."""
    steps = {
        "preflight": include("vllm_job", "preflight"), "checks": include(job, "checks"),
        "begin": include("vllm_job", "begin"), "open": include("vllm_job", "open"), "work": include(job, "work"),
        "failed": include("vllm_job", "failed"), "end": include("vllm_job", "end"),
        "report": include(job, "report"), "finish": include("vllm_job", "finish"),
    }
    if order is not None:
        return [{"hosts": "all", "tasks": [steps[name] for name in order]}]
    return [{"hosts": "all", "tasks": [
        steps["preflight"], steps["checks"], steps["begin"],
        {"name": "Work", "block": [steps["open"], steps["work"]], "rescue": [steps["failed"]],
         "always": [steps["end"]]},
        {"name": "Report", "block": [steps["report"]], "rescue": [steps["failed"]], "always": [steps["finish"]]},
    ]}]


def house(tmp_path: Path) -> Path:
    """A skeleton, a piece and two job roles on it, each sequenced by its playbook, all keeping to the rules."""
    keep = {"name": "Keep", "ansible.builtin.set_fact": {"__vllm_job_x": 1}}
    role(tmp_path, "vllm_job", SKELETON_ENTRIES, begin=[keep])
    say = {"name": "Do", "ansible.builtin.debug": {"msg": "{{ __piece_y }}"}}
    role(tmp_path, "piece", ("main", "checks"), main=[say])
    (tmp_path / "playbooks").mkdir()
    for job in ("job_a", "job_b"):
        role(tmp_path, job, ("main", "checks", "work", "report"),
             work=[{"name": "Block", "block": [include("piece", "checks"), include("piece")]}])
        (tmp_path / f"playbooks/{job}.yml").write_text(yaml.safe_dump(job_play(job)))
        entry = [{"ansible.builtin.import_playbook": f"playbooks/{job}.yml"}]
        (tmp_path / f"{job}.yml").write_text(yaml.safe_dump(entry))
    return tmp_path


def test_a_house_that_keeps_to_the_rules_passes(tmp_path):
    assert check(house(tmp_path)) == []


def test_an_undeclared_entry_point_is_refused(tmp_path):
    root = house(tmp_path)
    (root / "roles/job_a/tasks/work.yml").write_text(yaml.safe_dump([include("piece", "measure.yml")]))
    assert check(root) == ["roles/job_a/tasks/work.yml: enters role piece through tasks_from measure, which its "
                           "meta/argument_specs.yml does not declare as an entry point"]


def test_a_role_including_a_job_role_is_refused(tmp_path):
    root = house(tmp_path)
    (root / "roles/job_b/tasks/work.yml").write_text(yaml.safe_dump([{"name": "B", "block": [
        {"name": "R", "rescue": [include("job_a", "report")], "block": []}]}]))
    assert check(root) == ["roles/job_b/tasks/work.yml: role job_b includes job role job_a; a job is sequenced by its "
                           "playbook, and what jobs share belongs in vllm_job or in a piece role"]


def test_the_skeleton_calling_back_its_job_is_refused(tmp_path):
    root = house(tmp_path)
    (root / "roles/vllm_job/tasks/begin.yml").write_text(yaml.safe_dump([include("{{ __vllm_job_role }}", "work")]))
    assert check(root) == ["roles/vllm_job/tasks/begin.yml: includes a role named by a template "
                           "({{ __vllm_job_role }}); name the role, so that every edge between roles can be read"]


def test_a_job_playbook_out_of_the_skeleton_s_order_is_refused(tmp_path):
    root = house(tmp_path)
    # The report before the restore, and no finish: the report would not see the downtime, the error never raised.
    order = ("preflight", "checks", "begin", "open", "work", "failed", "report", "end")
    (root / "playbooks/job_a.yml").write_text(yaml.safe_dump(job_play("job_a", order=order)))
    assert check(root) == [
        "playbooks/job_a.yml: runs the job as vllm_job:preflight, <job>:checks, vllm_job:begin, vllm_job:open, "
        "<job>:work, vllm_job:failed, <job>:report, vllm_job:end; a job playbook runs vllm_job:preflight, "
        "<job>:checks, vllm_job:begin, vllm_job:open, <job>:work, vllm_job:failed, vllm_job:end, <job>:report, "
        "vllm_job:failed, vllm_job:finish (roles/vllm_job/meta/argument_specs.yml)"]


def test_another_role_s_private_name_is_refused_in_roles_and_playbooks(tmp_path):
    root = house(tmp_path)
    (root / "roles/job_a/tasks/report.yml").write_text(
        yaml.safe_dump([{"name": "Say", "ansible.builtin.debug": {"msg": "{{ __vllm_job_x }} {{ __job_a_z }}"}}]))
    (root / "print.yml").write_text(yaml.safe_dump([{"import_playbook": "playbooks/print.yml"}]))
    (root / "playbooks/print.yml").write_text("- hosts: all\n  tasks:\n    - ansible.builtin.debug:\n"
                                              "        msg: '{{ __piece_y }}'\n")
    assert check(root) == [
        "roles/job_a/tasks/report.yml: uses __vllm_job_x, a private name of role vllm_job",
        "playbooks/print.yml: uses __piece_y, a private name of role piece",
    ]


def test_an_unknown_role_is_named(tmp_path):
    root = house(tmp_path)
    (root / "roles/job_a/tasks/checks.yml").write_text(yaml.safe_dump([include("nowhere")]))
    assert check(root) == ["roles/job_a/tasks/checks.yml: includes role nowhere, which is not in roles/"]


def test_a_role_called_by_its_short_name_is_refused(tmp_path):
    root = house(tmp_path)
    (root / "roles/job_a/tasks/checks.yml").write_text(yaml.safe_dump([include("piece", "checks", short=True)]))
    play = [{"hosts": "all", "roles": ["piece"]}]
    (root / "playbooks/extra.yml").write_text(yaml.safe_dump(play))
    (root / "extra.yml").write_text(yaml.safe_dump([{"ansible.builtin.import_playbook": "playbooks/extra.yml"}]))
    assert check(root) == [
        "roles/job_a/tasks/checks.yml: includes role piece by a short name; call it vllm_ops.serving.piece, "
        "as from an installed collection",
        "playbooks/extra.yml: includes role piece by a short name; call it vllm_ops.serving.piece, "
        "as from an installed collection"]


def test_a_template_may_use_its_own_roles_private_names_and_no_others(tmp_path):
    root = house(tmp_path)
    (root / "roles/piece/templates").mkdir()
    (root / "roles/piece/templates/unit.j2").write_text("{{ __piece_y }} {{ __job_b_w }}\n")
    assert check(root) == ["roles/piece/templates/unit.j2: uses __job_b_w, a private name of role job_b"]


def test_an_operation_without_a_root_entry_is_refused(tmp_path):
    root = house(tmp_path)
    (root / "job_b.yml").unlink()
    assert check(root) == ["playbooks/job_b.yml: no root entry job_b.yml imports it; every operation has one, "
                           "the way ops staff run them"]


def test_a_root_entry_the_built_collection_would_carry_is_refused(tmp_path):
    root = house(tmp_path)
    (root / "galaxy.yml").write_text(yaml.safe_dump({"build_ignore": ["job_a.yml", "molecule"]}))
    assert check(root) == ["job_b.yml: the root entry is not in galaxy.yml's build_ignore; the built collection "
                           "would carry it beside playbooks/job_b.yml"]


def test_a_scenario_named_for_no_operation_and_no_role_is_refused(tmp_path):
    root = house(tmp_path)
    for scenario in ("job_a", "job_b_multi", "piece", "default", "resources", "campaign"):
        (root / "molecule" / scenario).mkdir(parents=True)
    assert check(root) == ["molecule/campaign: a scenario is named for the operation (playbooks/<op>.yml) or the "
                           "role (roles/<role>) whose tests it holds"]
