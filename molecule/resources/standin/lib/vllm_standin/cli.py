"""``vllm``'s command line: ``serve``, ``bench serve``, ``--version``, and the internal roles
(``--internal-engine FD``, ``--internal-worker FD``) a child is re-executed with."""

import socket
import sys

from vllm_standin import VERSION
from vllm_standin.api_server import api_main
from vllm_standin.bench import bench_main
from vllm_standin.config import serve_help
from vllm_standin.engine import engine_main
from vllm_standin.knobs import fault, load_knob_file
from vllm_standin.processes import Channel
from vllm_standin.worker import worker_main


def main(argv):
    if len(argv) == 2 and argv[0] in ("--internal-engine", "--internal-worker"):
        chan = Channel(socket.socket(fileno=int(argv[1])))
        role_main = engine_main if argv[0] == "--internal-engine" else worker_main
        return role_main(chan.recv(), chan)
    load_knob_file()
    if argv[:1] == ["--version"]:
        print(VERSION)
        return 0
    if argv[:1] == ["bench"]:
        if fault("bench-fails") is not None:
            print("vllm bench: not available (the vLLM stand-in's fault switch bench-fails)", file=sys.stderr)
            return 1
        return bench_main(argv[1:])
    if argv[:1] == ["serve"]:
        topics = [a.partition("=")[2] if "=" in a else "" for a in argv[1:] if a.split("=", 1)[0] in ("-h", "--help")]
        if topics:
            print(serve_help(topics[0], VERSION))
            return 0
    if argv[:1] != ["serve"]:
        print("usage: vllm serve MODEL [options] | vllm bench serve [options]   (vLLM stand-in: "
              "only 'serve' and 'bench serve' are modelled)", file=sys.stderr)
        return 2
    return api_main(argv[1:])


def run():
    """The entry point of the launcher and of ``python3 -m vllm_standin``: exit with main's status."""
    sys.exit(main(sys.argv[1:]))
