"""A stand-in for ``vllm serve`` and ``vllm bench serve`` (vLLM 0.32) on a host without GPUs.

Test double for the sandbox host, installed as /opt/vllm-standin/bin/vllm (the launcher
``bin/vllm``, with this package in /opt/vllm-standin/lib): it takes the CLI the systemd unit
passes and behaves as vLLM 0.32 does from the outside: an API server process that starts a
``VLLM::EngineCore`` child, which starts one ``VLLM::Worker_TP<r>`` per rank
(``VLLM::Worker`` at TP 1); each worker holds its GPU device file and claims memory for the
nvidia-smi stand-in; the port refuses connections through the whole (simulated) load; then it
serves /health, /version, /v1/models, /v1/completions, /metrics and, with --profiler-config,
/start_profile and /stop_profile, writing one re-timed trace per rank; --speculative-config
and --max-num-seqs shape the decode timing and /metrics. ``vllm bench serve`` is a real
client of vLLM 0.32's serving benchmark (random dataset, streamed completions) that prints
and saves vLLM's result.

One module per program it imitates, and the small modules they share:

- ``cli``: ``vllm ...``'s dispatch (serve, bench serve, --version, the internal roles);
- the programs: ``api_server`` (with its parts ``handler``, ``generation``, ``metrics``),
  ``engine`` (EngineCore), ``worker`` (Worker_TP<r>), ``bench`` (``vllm bench serve``);
- shared: ``knobs`` (environment knobs, fault switches), ``logs`` (vLLM's log lines),
  ``processes`` (spawning titled children, their channel), ``config`` (the command line and
  vLLM's config checks), ``traces`` (re-timed templates, the profiler's files), ``vocab``.

Layers, checked by tests/standin/test_package.py: nothing imports ``cli``; a program never
imports another program (nor the API server's parts); a shared module imports no program.

Python 3.11 standard library only (the sandbox's python3 has no pip).
Knobs and fault switches: see README.md in molecule/resources/standin.
"""

from vllm_standin.knobs import release

# The release this installation plays: vLLM 0.32.0, or what its release.json says (knobs.release).
VERSION = str(release().get("version") or "0.32.0")
FINGERPRINT = f"vllm-{VERSION}-5f0a1d2e"  # vLLM: version and a digest of its build
ENGINE_DEAD = "EngineCore encountered an issue. See stack trace (above) for the root cause."
