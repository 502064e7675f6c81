"""How the stand-in's processes are started and talk: API server -> EngineCore -> workers.

A child is this stand-in again (``ENTRY``: the launcher ``bin/vllm``, or the package's
``__main__.py``, that this process was started from), exec'd with argv[0] = its title (``VLLM::EngineCore``) so that
/proc/PID/cmdline begins with it, as vLLM's setproctitle does, and with its role flag and
the fd of its end of a socketpair. Its config travels over that channel as JSON lines,
never on a command line (the API key is in it)."""

import ctypes
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time

# What re-executes this stand-in: every process of the tree is started from the same entry,
# and a child gets it as its script (argv[1]), so sys.argv[0] is it in every process.
ENTRY = os.path.abspath(sys.argv[0])


def worker_name(rank, tp):
    """vLLM's worker process name: ``Worker``, with ``_TP<r>`` only when TP > 1."""
    return f"Worker_TP{rank}" if tp > 1 else "Worker"


def set_comm(title):
    """prctl(PR_SET_NAME): the kernel keeps 15 bytes, as with setproctitle."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, ctypes.c_char_p(title.encode()[:15]), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def python_executable():
    # Children started with argv[0] = "VLLM::..." have an empty sys.executable.
    return sys.executable or os.readlink("/proc/self/exe")


def spawn_titled(title, role, config):
    """Start this stand-in again as a child whose /proc/PID/cmdline begins with title;
    its config goes over the returned channel (never on a command line)."""
    chan, child = channel_pair()
    proc = subprocess.Popen([title, ENTRY, role, str(child.fileno())],
                            executable=python_executable(), pass_fds=(child.fileno(),))
    child.close()
    chan.send(config)
    return proc, chan


class Channel:
    """A JSON-lines channel over a socketpair (API <-> engine <-> workers)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.send_lock = threading.Lock()

    def send(self, obj):
        data = (json.dumps(obj) + "\n").encode()
        with self.send_lock:
            try:
                self.sock.sendall(data)
                return True
            except OSError:
                return False

    def recv(self, timeout=None):
        """Next message; None on timeout; raises EOFError when the peer died."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buf:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.sock], [], [], wait)
            if not ready:
                return None
            try:
                chunk = self.sock.recv(65536)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise EOFError
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


def channel_pair():
    parent, child = socket.socketpair()
    return Channel(parent), child
