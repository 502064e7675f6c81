"""playbooks/release_gpus.yml and the restart path on a systemd host with simulated GPUs."""

from testlib import UNIT, holders, wait_for

RELEASE = "Release the GPU device nodes held by the service"


def gpu_memory(host) -> list[int]:
    out = host.check_output("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits")
    return [int(v) for v in out.split()]


def test_clean_stop_leaves_nothing_to_release(host, play):
    host.check_output(f"systemctl stop {UNIT}")
    run = play("playbooks/release_gpus.yml")
    assert run.rc == 0, run.output[-3000:]
    assert run.changed == 0
    assert run.result(RELEASE)["signalled"] == []
    assert gpu_memory(host) == [0, 0]


def test_check_mode_lists_and_signals_nothing(host, play, leftover):
    pids = leftover()
    run = play("playbooks/release_gpus.yml", "--check")
    assert run.rc == 0, run.output[-3000:]
    result = run.result(RELEASE)
    assert set(pids) <= set(result["would_signal"])
    assert result["signalled"] == []
    assert all(host.file(f"/proc/{pid}").exists for pid in pids)


def test_leftover_server_started_outside_systemd_is_released(host, play, leftover):
    pids = leftover()
    assert min(gpu_memory(host)) > 100000, "the workers' memory should show before the release"
    run = play("playbooks/release_gpus.yml")
    assert run.rc == 0, run.output[-3000:]
    result = run.result(RELEASE)
    assert set(pids) <= set(result["signalled"])
    assert result["killed"] == []
    assert holders(host, "/dev/nvidia0") == [] and holders(host, "/dev/nvidia1") == []
    assert gpu_memory(host) == [0, 0]
    again = play("playbooks/release_gpus.yml")
    assert again.rc == 0 and again.changed == 0


def test_worker_ignoring_sigterm_is_killed_after_the_timeout(host, play, leftover):
    host.check_output("touch /run/vllm-standin/worker-ignores-sigterm")
    workers = leftover()
    run = play("playbooks/release_gpus.yml", "-e", "gpu_release_term_timeout_s=3")
    assert run.rc == 0, run.output[-3000:]
    result = run.result(RELEASE)
    # The API server and EngineCore go on SIGTERM; the workers need SIGKILL.
    assert set(workers) <= set(result["killed"])
    assert holders(host, "/dev/nvidia0") == [] and holders(host, "/dev/nvidia1") == []


def test_foreign_holder_is_left_alive_and_named(host, play):
    host.check_output(f"systemctl stop {UNIT}")
    # Another team's job, run by a user of the GPU group.
    host.check_output("id batchjob >/dev/null 2>&1 || useradd --no-create-home --groups video batchjob")
    host.check_output("setsid -f runuser -u batchjob -- sh -c 'exec sleep 600 < /dev/nvidia1'")
    try:
        wait_for(lambda: holders(host, "/dev/nvidia1"), "the foreign job to hold /dev/nvidia1")
        (pid,) = holders(host, "/dev/nvidia1")
        run = play("playbooks/release_gpus.yml")
        assert run.rc != 0
        message = run.result(RELEASE)["msg"]
        assert f"PID {pid} (command 'sleep 600', user batchjob) holds /dev/nvidia1" in message
        assert host.file(f"/proc/{pid}").exists, "a foreign process must never be signalled"
    finally:
        host.run("pkill -9 -u batchjob sleep")


def test_restore_releases_leftovers_and_brings_the_service_back(host, play, leftover):
    pids = leftover()
    run = play("playbooks/restore.yml")
    assert run.rc == 0, run.output[-3000:]
    assert not any(host.file(f"/proc/{pid}").exists for pid in pids)
    assert host.check_output(f"systemctl is-active {UNIT}") == "active"
    served = holders(host, "/dev/nvidia0") + holders(host, "/dev/nvidia1")
    assert len(served) == 2
    for pid in served:
        assert f"{UNIT}.service" in host.file(f"/proc/{pid}/cgroup").content_string
    again = play("playbooks/restore.yml")
    assert again.rc == 0 and again.changed == 0
