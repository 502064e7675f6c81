"""Tables of fixed-size records on disk, read back a bounded chunk at a time.

The reader spills a rank's GPU activities and host launch calls into two such tables, and the
per-step analysis (:mod:`.timeline`) builds its orderings (by correlation, by time, by step)
as more of them, with a counting sort: one pass counts the records per key, one pass writes
each chunk's records at their group's offsets (:func:`partition`; by value, over bins of the
range and again within a bin that holds more than a chunk: :func:`sorted_batches`). A table is
an unlinked temporary file in :func:`tempfile.gettempdir`: it never shows in a directory
listing, and its space goes back to the system when the table is closed or garbage-collected,
or when the process ends, however it ends (Linux and other POSIX systems). Where the
temporary directory is a tmpfs, the tables are in memory after all (not the process's): point
``TMPDIR`` at a disk for the memory to stay flat. Reading holds at most ``CHUNK_ROWS`` records
in memory (more only where a :func:`partition` key has more: the per-step analysis' batches of
whole steps), and writing only the chunk at hand.
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


_FINE_BINS = 4096
_PAIRWISE_BLOCK = 128  # numpy's PW_BLOCKSIZE: up to it, a sum is one unrolled loop


def sorted_batches(table: Table, field: str, lo: int = 0, hi: int | None = None):
    """The records of rows ``lo`` to ``hi`` of ``table`` in batches sorted by ``field``, as a
    stable sort of them all would order them (nan last), each of at most ``CHUNK_ROWS`` records.

    Up to ``CHUNK_ROWS`` records are sorted in memory. More are counting-sorted on disk into
    4096 bins over the range of ``field``, merged into batches of whole bins, and each batch is
    sorted the same way in turn, so a clump of values (or an outlier that stretches the range)
    only costs another level. Records with one value alone are already in order (file order)."""
    hi = table.rows if hi is None else hi
    if hi - lo <= CHUNK_ROWS:
        r = table.read(lo, hi)
        yield r[np.argsort(r[field], kind="stable")]
        return
    exact = np.issubdtype(table.dtype[field], np.integer)  # integers beyond 2**53 stay apart
    vmin, vmax, nan = None, None, False
    for c_lo in range(lo, hi, CHUNK_ROWS):
        v = table.read(c_lo, min(c_lo + CHUNK_ROWS, hi))[field]
        if not exact:
            ok = ~np.isnan(v)
            nan |= not ok.all()
            v = v[ok]
        if len(v):
            lo_v, hi_v = v.min().item(), v.max().item()
            vmin = lo_v if vmin is None else min(vmin, lo_v)
            vmax = hi_v if vmax is None else max(vmax, hi_v)
    if vmin is None or (vmin == vmax and not nan):  # one value (or only nan): in order already
        for c_lo in range(lo, hi, CHUNK_ROWS):
            yield table.read(c_lo, min(c_lo + CHUNK_ROWS, hi))
        return
    # Values to bins 0 .. _FINE_BINS - 2 (the least and the greatest in different ones), nan to the last.
    if exact:
        step = (vmax - vmin) // (_FINE_BINS - 2) + 1

        def keys(r):  # the difference fits in 64 bits unsigned, whatever the signs
            return ((r[field].astype(np.uint64) - np.uint64(vmin % 2**64)) // np.uint64(step)).astype(np.int64)
    else:
        width = (vmax - vmin) / (_FINE_BINS - 2) if vmax > vmin else 1.0

        def keys(r):
            with np.errstate(invalid="ignore"):
                x = (r[field] - vmin) / width
                return np.where(np.isnan(x), _FINE_BINS - 1, np.clip(x, 0, _FINE_BINS - 2)).astype(np.int64)

    def chunks():
        for c_lo in range(lo, hi, CHUNK_ROWS):
            r = table.read(c_lo, min(c_lo + CHUNK_ROWS, hi))
            yield keys(r), r

    counts = np.zeros(_FINE_BINS, np.int64)
    for k, _ in chunks():
        counts += np.bincount(k, minlength=_FINE_BINS)
    part, batches = partition(chunks(), counts, CHUNK_ROWS, table.dtype)
    try:
        for b_lo, b_hi in batches:
            yield from sorted_batches(part, field, b_lo, b_hi)
    finally:
        part.close()


def pairwise_sum(table: Table, lo: int = 0, hi: int | None = None) -> float:
    """``np.sum`` of a 1-D float table, to the last bit, reading a chunk at a time: numpy sums
    more than 128 numbers pairwise, halving at a multiple of 8, so the halves are summed here
    the same way."""
    hi = table.rows if hi is None else hi
    n = hi - lo
    if n <= max(CHUNK_ROWS, _PAIRWISE_BLOCK):
        return np.sum(table.read(lo, hi))
    half = n // 2
    half -= half % 8
    return pairwise_sum(table, lo, lo + half) + pairwise_sum(table, lo + half, hi)
