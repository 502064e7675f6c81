"""Tables of fixed-size records on disk, read back a bounded chunk at a time.

The reader spills a rank's GPU activities and host launch calls into two such tables, and the
per-step analysis (:mod:`.timeline`) builds its orderings (by correlation, by time, by step)
as more of them, with a counting sort: one pass counts the records per key, one pass writes
each chunk's records at their group's offsets (:func:`partition`). A table is an unlinked
temporary file in :func:`tempfile.gettempdir`: it never shows in a directory listing, and its
space goes back to the system when the table is closed or garbage-collected, or when the
process ends, however it ends. Reading holds at most ``CHUNK_ROWS`` records in memory (a
partition's group, where a single group is larger: one step's activities).
"""

from __future__ import annotations

import os
import tempfile
import weakref

import numpy as np

CHUNK_ROWS = 1 << 16


class Table:
    """Records of one numpy dtype in an unlinked temporary file, in the order they were written."""

    def __init__(self, dtype):
        self.dtype = np.dtype(dtype)
        fd, name = tempfile.mkstemp(prefix="vllm-trace-", suffix=".bin")
        try:
            os.unlink(name)
        except OSError:
            os.close(fd)
            raise
        self.fd = fd
        self.rows = 0
        self._close = weakref.finalize(self, os.close, fd)

    def close(self) -> None:
        self._close()

    @property
    def closed(self) -> bool:
        return not self._close.alive

    def writer(self, buffering: int):
        """A buffered binary writer appending at the start (for a fresh table); call
        :meth:`sync_rows` once it is closed."""
        return open(self.fd, "wb", buffering=buffering, closefd=False)

    def sync_rows(self) -> None:
        self.rows = os.fstat(self.fd).st_size // self.dtype.itemsize

    def write_at(self, row: int, records: np.ndarray) -> None:
        data = memoryview(np.ascontiguousarray(records, self.dtype).view(np.uint8))
        offset = row * self.dtype.itemsize
        while len(data):
            n = os.pwrite(self.fd, data, offset)
            data, offset = data[n:], offset + n
        self.rows = max(self.rows, row + len(records))

    def append(self, records: np.ndarray) -> None:
        self.write_at(self.rows, records)

    def read(self, lo: int, hi: int) -> np.ndarray:
        """Rows ``lo`` to ``hi`` (exclusive) as a fresh array."""
        out = np.empty(max(hi - lo, 0), self.dtype)
        view = memoryview(out.view(np.uint8))
        offset, got = lo * self.dtype.itemsize, 0
        while got < len(view):
            n = os.preadv(self.fd, [view[got:]], offset + got)
            if n == 0:
                raise OSError(f"spill table ends at byte {offset + got}, before row {hi}")
            got += n
        return out

    def load(self) -> np.ndarray:
        """The whole table in memory (for tests and small tables)."""
        return self.read(0, self.rows)

    def chunks(self, rows: int | None = None):
        """``(first row, records)`` of consecutive chunks of at most ``rows`` (``CHUNK_ROWS``) records."""
        step = rows or CHUNK_ROWS
        for lo in range(0, self.rows, step):
            yield lo, self.read(lo, min(lo + step, self.rows))


def zip_chunks(*tables: Table):
    """Chunks of the same rows of tables that have one row per activity: ``(first row, arrays...)``."""
    rows = tables[0].rows
    for t in tables[1:]:
        if t.rows != rows:
            raise ValueError(f"tables of {rows} and {t.rows} rows cannot be read side by side")
    for lo in range(0, rows, CHUNK_ROWS):
        hi = min(lo + CHUNK_ROWS, rows)
        yield (lo, *(t.read(lo, hi) for t in tables))


def batch_rows(counts: np.ndarray, limit: int) -> list[tuple[int, int]]:
    """Consecutive keys with ``counts`` rows each, cut into row ranges ``(lo, hi)`` that hold
    whole keys and, where a key allows, at most ``limit`` rows (greedy: the same cuts as
    grouping the sorted rows themselves)."""
    bounds = np.r_[0, np.cumsum(counts, dtype=np.int64)]
    total = int(bounds[-1])
    out, lo = [], 0
    while lo < total:
        j = np.searchsorted(bounds, lo + limit, side="right") - 1
        hi = int(bounds[j]) if bounds[j] > lo else int(bounds[np.searchsorted(bounds, lo, side="right")])
        out.append((lo, hi))
        lo = hi
    return out


def key_batches(counts: np.ndarray, batches: list[tuple[int, int]]) -> np.ndarray:
    """The batch (index into ``batches``) that holds each key's rows."""
    starts = np.r_[0, np.cumsum(counts, dtype=np.int64)[:-1]]
    his = np.array([hi for _, hi in batches], np.int64)
    return np.minimum(np.searchsorted(his, starts, side="right"), max(len(batches) - 1, 0))


def partition(chunks, counts: np.ndarray, limit: int, dtype) -> tuple[Table, list[tuple[int, int]]]:
    """Counting sort's second pass: write records into a new table grouped by key, keys in
    order, records of one key in the order ``chunks`` yields them.

    ``counts`` are the rows per key (the first pass); ``chunks`` yields ``(keys, records)``
    of every record (key -1: left out). Returns the table and its batches (:func:`batch_rows`
    with ``limit``): row ranges of whole keys. Only the batch of each record is sorted on, so
    each chunk costs one write per batch it touches."""
    batches = batch_rows(counts, limit)
    batch_of = key_batches(counts, batches)
    cursor = np.array([lo for lo, _ in batches], np.int64)
    out = Table(dtype)
    try:
        for keys, records in chunks:
            keep = keys >= 0
            b = batch_of[keys[keep]]
            if not len(b):
                continue
            order = np.argsort(b, kind="stable")
            b, records = b[order], records[keep][order]
            cuts = np.flatnonzero(np.r_[True, b[1:] != b[:-1]])
            for s, e in zip(cuts.tolist(), np.r_[cuts[1:], len(b)].tolist(), strict=True):
                k = int(b[s])
                out.write_at(int(cursor[k]), records[s:e])
                cursor[k] += e - s
    except BaseException:
        out.close()
        raise
    return out, batches


def pairwise_sum(table: Table, lo: int = 0, hi: int | None = None) -> float:
    """``np.sum`` of a 1-D float table, to the last bit, reading a chunk at a time: numpy sums
    pairwise, halving at a multiple of 8, so the halves are summed here the same way."""
    hi = table.rows if hi is None else hi
    n = hi - lo
    if n <= CHUNK_ROWS:
        return np.sum(table.read(lo, hi))
    half = n // 2
    half -= half % 8
    return pairwise_sum(table, lo, lo + half) + pairwise_sum(table, lo + half, hi)
