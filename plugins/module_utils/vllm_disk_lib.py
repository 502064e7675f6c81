"""The checkpoint's disk, measured on the host while the service serves: how fast it reads the
checkpoint's files (the floor of a model load's weights phase), how much of them already sits in the
page cache, and the page cache warmed with them before a planned restart. Standard library only
(the managed host's Python, 3.9 or newer); the module ``vllm_disk`` is its front end.

Definitions (every figure is defined here once):

- **the files**: the checkpoint's weight files (``vllm_ops_loads.weight_files``: what a load reads);
  **checkpoint bytes** their sizes' sum.
- **residency** (:func:`residency`): each file mapped (``mmap``, read-only, never touched) and asked
  ``mincore(2)`` which of its pages the page cache holds, in windows of :data:`WINDOW`;
  ``resident_fraction`` = resident bytes / checkpoint bytes. Reads nothing.
- **the sample** (:func:`sample_ranges`): ``chunks`` = sample bytes / chunk bytes ranges of one chunk
  each, dealt round-robin over the files and spread evenly inside each, every offset a multiple of the
  chunk (so aligned for ``O_DIRECT``); a range with a hole in it (``SEEK_HOLE``: a sparse file, such as
  the sandbox's toy checkpoint, whose data is mostly holes) is left out, since reading a hole times no
  disk.
- **the floor** (:func:`measure_floor`): each range read once with ``O_DIRECT`` into a page-aligned
  buffer (the page cache bypassed: the disk itself, even for resident files); ``seconds`` = the time
  spent inside the reads, ``gbps`` = bytes read / seconds / 1e9. Bounded: at most ``max_bytes`` and
  ``max_seconds`` of wall time; **paced**: after each read the process sleeps until its average rate
  since the start is at most ``max_rate`` bytes/s, so the reads run at the disk's own speed but take
  only that share of it; niced (19) and at the lowest best-effort I/O priority. Where the file system
  refuses ``O_DIRECT`` (``EINVAL``: tmpfs, some overlays), only ranges wholly absent from the page
  cache are read, buffered, and dropped again after (``posix_fadvise(DONTNEED)`` on exactly those
  ranges), so the cache is left as found; ``method`` says which. Not measured (``gbps`` null, ``why``
  says why) when fewer than :data:`MIN_SAMPLE_BYTES` could be read.
- **the warm-up** (:func:`warm_plan`, :func:`warm`): the bytes not yet resident must fit in the host's
  ``MemAvailable`` less a reserve, else it is refused with both figures; each file read whole,
  sequentially (``posix_fadvise(SEQUENTIAL)``), paced to ``max_rate`` and niced as the floor.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import platform
import time

WINDOW = 1 << 30  # bytes mapped at once for mincore
MIN_SAMPLE_BYTES = 64 << 20  # less than this read: no floor worth the name
ALIGN = 4096
# ioprio_set(2) by architecture (no libc wrapper); IOPRIO_CLASS_BE at its lowest level, 7.
IOPRIO_SET = {"x86_64": 251, "aarch64": 30, "ppc64le": 273, "s390x": 282}
IOPRIO_WHO_PROCESS, IOPRIO_CLASS_BE, IOPRIO_CLASS_SHIFT = 1, 2, 13

PROT_READ, MAP_SHARED = 0x1, 0x01


class DiskError(Exception):
    """A file that cannot be read or mapped; the message names it."""


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    return libc


def low_priority():
    """Nice 19 and the lowest best-effort I/O priority for this process; returns what was set, in words."""
    done = []
    try:
        os.nice(19 - os.nice(0))
        done.append("nice 19")
    except OSError:
        pass
    number = IOPRIO_SET.get(platform.machine())
    if number is not None:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(number, IOPRIO_WHO_PROCESS, 0, (IOPRIO_CLASS_BE << IOPRIO_CLASS_SHIFT) | 7) == 0:
            done.append("I/O best-effort 7")
    return ", ".join(done) or "priority unchanged"


def meminfo(path="/proc/meminfo"):
    """``/proc/meminfo`` in bytes: ``{MemTotal: ..., MemAvailable: ..., ...}``."""
    out = {}
    with open(path, encoding="ascii") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            parts = rest.split()
            if parts and parts[0].isdigit():
                out[key] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    return out


def file_residency(path, libc=None, window=WINDOW):
    """``(size, resident bytes)`` of one file, from mincore(2) on a read-only shared mapping."""
    libc = libc or _libc()
    page = mmap.PAGESIZE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as exc:
        raise DiskError(f"{path}: cannot open: {exc.strerror}") from None
    try:
        size = os.fstat(fd).st_size
        resident = 0
        offset = 0
        while offset < size:
            length = min(window, size - offset)
            addr = libc.mmap(None, length, PROT_READ, MAP_SHARED, fd, offset)
            if addr in (None, ctypes.c_void_p(-1).value):
                raise DiskError(f"{path}: mmap failed: {os.strerror(ctypes.get_errno())}")
            try:
                pages = (length + page - 1) // page
                vec = (ctypes.c_ubyte * pages)()
                if libc.mincore(ctypes.c_void_p(addr), length, vec) != 0:
                    raise DiskError(f"{path}: mincore failed: {os.strerror(ctypes.get_errno())}")
                counted = bytes(vec)
                hits = pages - counted.count(0)
                resident += min(hits * page, length)
            finally:
                libc.munmap(ctypes.c_void_p(addr), length)
            offset += length
        return size, min(resident, size)
    finally:
        os.close(fd)


def residency(files):
    """``{files, bytes, resident_bytes, resident_fraction}`` of the checkpoint (reads nothing)."""
    libc = _libc()
    total = resident = 0
    for path in files:
        size, hits = file_residency(path, libc)
        total += size
        resident += hits
    return {"files": len(files), "bytes": total, "resident_bytes": resident,
            "resident_fraction": round(resident / total, 4) if total else None}


def _has_hole(fd, offset, length):
    """Whether [offset, offset + length) holds a hole (SEEK_HOLE finds one inside it)."""
    try:
        return os.lseek(fd, offset, os.SEEK_HOLE) < offset + length
    except OSError:
        return False  # no SEEK_HOLE: take the file as dense


def sample_ranges(files, sample_bytes, chunk_bytes):
    """``([(path, offset, length)], holes)``: the ranges the floor reads (see the module's docstring), and how
    many candidates were left out for holes."""
    chunk = max(ALIGN, chunk_bytes // ALIGN * ALIGN)
    wanted = max(1, sample_bytes // chunk)
    sizes = []
    for path in files:
        try:
            sizes.append((path, os.path.getsize(path)))
        except OSError as exc:
            raise DiskError(f"{path}: cannot stat: {exc.strerror}") from None
    slots = {path: size // chunk for path, size in sizes}
    per_file = {path: 0 for path, _ in sizes}
    order = [p for p, _ in sizes if slots[p] > 0]
    if not order:
        return [], 0
    n = 0
    while n < wanted and any(per_file[p] < slots[p] for p in order):
        for path in order:
            if n < wanted and per_file[path] < slots[path]:
                per_file[path] += 1
                n += 1
    ranges, holes = [], 0
    for path in order:
        k = per_file[path]
        if not k:
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            for i in range(k):
                slot = (2 * i + 1) * slots[path] // (2 * k)  # spread evenly through the file
                offset = slot * chunk
                if _has_hole(fd, offset, chunk):
                    holes += 1
                else:
                    ranges.append((path, offset, chunk))
        finally:
            os.close(fd)
    return ranges, holes


def _range_resident(fd, offset, length, libc):
    """Whether any page of [offset, offset + length) is in the page cache."""
    addr = libc.mmap(None, length, PROT_READ, MAP_SHARED, fd, offset)
    if addr in (None, ctypes.c_void_p(-1).value):
        return True  # cannot tell: treat as resident, so it is not read
    try:
        pages = (length + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = (ctypes.c_ubyte * pages)()
        if libc.mincore(ctypes.c_void_p(addr), length, vec) != 0:
            return True
        return bytes(vec).count(0) != pages
    finally:
        libc.munmap(ctypes.c_void_p(addr), length)


def _pace(started, done_bytes, max_rate):
    """Sleep until the average rate since ``started`` is at most ``max_rate`` bytes/s; returns the sleep."""
    if not max_rate:
        return 0.0
    due = started + done_bytes / max_rate - time.monotonic()
    if due > 0:
        time.sleep(due)
        return due
    return 0.0


def measure_floor(files, sample_bytes, chunk_bytes, max_rate, max_seconds, clock=time.monotonic):
    """The disk's floor (module docstring): ``{gbps, bytes, seconds, wall_s, paced_s, chunks, chunk_bytes,
    holes_skipped, method, max_rate_bytes_s, why}``."""
    ranges, holes = sample_ranges(files, sample_bytes, chunk_bytes)
    out = {"gbps": None, "bytes": 0, "seconds": 0.0, "wall_s": 0.0, "paced_s": 0.0, "chunks": 0,
           "chunk_bytes": ranges[0][2] if ranges else chunk_bytes, "holes_skipped": holes, "method": None,
           "max_rate_bytes_s": max_rate, "why": None}
    if not ranges:
        out["why"] = (f"the files are sparse: every sampled range holds a hole ({holes} of them), and reading a "
                      "hole times no disk" if holes else "the checkpoint has no file as large as one chunk")
        return out
    buf = mmap.mmap(-1, out["chunk_bytes"])
    libc = _libc()
    started = clock()
    method = "O_DIRECT"
    try:
        for path, offset, length in ranges:
            if clock() - started > max_seconds:
                break
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
                direct = True
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise DiskError(f"{path}: cannot open: {exc.strerror}") from None
                fd, direct = os.open(path, os.O_RDONLY), False
            try:
                if not direct:
                    method = "buffered, ranges not in the page cache only, dropped after (O_DIRECT refused)"
                    if _range_resident(fd, offset, length, libc):
                        continue
                t = clock()
                try:
                    got = os.preadv(fd, [buf], offset)
                except OSError as exc:
                    if exc.errno != errno.EINVAL or not direct:
                        raise DiskError(f"{path}: read at {offset} failed: {exc.strerror}") from None
                    os.close(fd)
                    fd, direct = os.open(path, os.O_RDONLY), False
                    method = "buffered, ranges not in the page cache only, dropped after (O_DIRECT refused)"
                    if _range_resident(fd, offset, length, libc):
                        continue
                    t = clock()
                    got = os.preadv(fd, [buf], offset)
                out["seconds"] += clock() - t
                if not direct:
                    os.posix_fadvise(fd, offset, length, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            out["bytes"] += got
            out["chunks"] += 1
            out["paced_s"] += _pace(started, out["bytes"], max_rate)
    finally:
        buf.close()
    out["wall_s"] = round(clock() - started, 3)
    out["seconds"] = round(out["seconds"], 4)
    out["paced_s"] = round(out["paced_s"], 3)
    out["method"] = method
    if out["bytes"] < MIN_SAMPLE_BYTES or out["seconds"] <= 0:
        out["why"] = (f"only {out['bytes']} bytes could be read ({out['chunks']} chunk(s); at least "
                      f"{MIN_SAMPLE_BYTES} are needed" + (f", {holes} range(s) with holes left out" if holes else "")
                      + ("; the rest is in the page cache and O_DIRECT is refused here" if "buffered" in method else "")
                      + ")")
    else:
        out["gbps"] = round(out["bytes"] / out["seconds"] / 1e9, 3)
    return out


def warm_plan(files, memory, reserve_bytes, max_rate=0):
    """Whether the checkpoint fits in the page cache: ``{checkpoint_bytes, resident_bytes, needed_bytes,
    available_bytes, reserve_bytes, fits, read_s, message}`` (needed = the bytes not yet resident; fits when
    needed <= MemAvailable - reserve; read_s = needed / ``max_rate`` bytes/s, the warm-up's longest at its pace,
    None unpaced)."""
    res = residency(files)
    needed = res["bytes"] - res["resident_bytes"]
    available = memory.get("MemAvailable")
    fits = available is not None and needed <= available - reserve_bytes
    gib = 2**30
    message = (f"the checkpoint is {res['bytes'] / gib:.1f} GiB ({res['bytes']} bytes in {res['files']} file(s)), "
               f"{res['resident_bytes'] / gib:.1f} GiB of it already in the page cache, so {needed / gib:.1f} GiB "
               f"to read; the host has {(available or 0) / gib:.1f} GiB available (MemAvailable {available} bytes) "
               f"less the reserve {reserve_bytes / gib:.1f} GiB")
    return {"checkpoint_bytes": res["bytes"], "resident_bytes": res["resident_bytes"], "needed_bytes": needed,
            "available_bytes": available, "reserve_bytes": reserve_bytes, "fits": fits,
            "read_s": round(needed / max_rate, 1) if max_rate > 0 else None,
            "resident_fraction": res["resident_fraction"], "message": message}


def warm(files, max_rate, chunk_bytes=16 << 20, clock=time.monotonic):
    """Read every file whole, sequentially, paced to ``max_rate`` bytes/s: ``{bytes, seconds, gbps, paced_s}``."""
    buf = bytearray(chunk_bytes)
    view = memoryview(buf)
    started = clock()
    done = 0
    paced = 0.0
    for path in files:
        try:
            with open(path, "rb", buffering=0) as fh:
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
                while True:
                    got = fh.readinto(view)
                    if not got:
                        break
                    done += got
                    paced += _pace(started, done, max_rate)
        except OSError as exc:
            raise DiskError(f"{path}: cannot read: {exc.strerror}") from None
    seconds = clock() - started
    return {"bytes": done, "seconds": round(seconds, 3), "paced_s": round(paced, 3),
            "gbps": round(done / seconds / 1e9, 3) if seconds > 0 else None}
