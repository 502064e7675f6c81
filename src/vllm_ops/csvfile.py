"""The project's CSV logs (a host's campaign history, its experiments): appended one job at a
time, under a lock, and never to a file whose header is not the columns this version writes.

:func:`append_csv_rows` checks every row before it writes anything. A file whose header is the
columns less some that were added since (named by the caller, at the end) is migrated: rewritten
with the new header, its rows padded with empty cells. Any other header is refused with the
caller's error class, and the operator moves the file aside. An empty cell is a figure that was not
measured, never a zero.
"""

from __future__ import annotations

import csv
import fcntl
import io
import os
from collections.abc import Mapping
from pathlib import Path

from .errors import VllmOpsError

__all__ = ["append_csv_rows"]


def _cell(value: object, what: str, error: type[Exception]) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (Mapping, list, tuple)):
        raise error(f"a {what} cell must be a scalar, got {type(value).__name__}: {value!r}")
    return str(value)


def append_csv_rows(path: str | os.PathLike, rows: list[Mapping], columns: tuple[str, ...], *,
                    added_columns: tuple[str, ...] = (), what: str = "CSV",
                    error: type[Exception] = VllmOpsError) -> bool:
    """The shared appender of the project's CSV logs (campaign history, experiments): append
    ``rows`` (each with exactly ``columns`` as keys, in order) to the CSV at ``path``, parents
    created, the header first when the file is new or empty; True when the header was written.

    All rows are checked before anything is written, and written under one exclusive lock on the
    file (concurrent appenders are serialized). A file whose header differs from ``columns`` is
    never appended to (``error``, naming the file and both headers), except a header that is
    ``columns`` less some of ``added_columns`` at the end: that file is rewritten with the new
    header first, its rows padded with empty cells."""
    lines = io.StringIO()
    writer = csv.writer(lines, lineterminator="\n")
    for row in rows:
        if not isinstance(row, Mapping) or tuple(row) != columns:
            got = list(row) if isinstance(row, Mapping) else type(row).__name__
            raise error(f"a {what} row needs exactly the columns {list(columns)}, got {got}")
        writer.writerow([_cell(row[c], what, error) for c in columns])
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", newline="", encoding="utf-8") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        fh.seek(0)
        first = fh.readline()
        new = not first.strip()
        if not new:
            header = next(csv.reader([first]), [])
            if tuple(header) != columns and _migratable(header, columns, added_columns):
                _migrate(fh, header, columns)
            elif tuple(header) != columns:
                raise error(
                    f"{path}: its header differs from this version's columns, so nothing was appended "
                    f"(file: {','.join(header)}; expected: {','.join(columns)}); move the file aside "
                    "and a new one is started"
                )
            fh.seek(0, os.SEEK_END)
            if fh.tell() and not _ends_with_newline(path):
                fh.write("\n")
        if new:
            fh.seek(0)
            fh.truncate()
            csv.writer(fh, lineterminator="\n").writerow(columns)
        fh.write(lines.getvalue())
    return new


def _migratable(header: list[str], columns: tuple[str, ...], added: tuple[str, ...]) -> bool:
    """Whether ``header`` is ``columns`` less some of the ``added`` columns at the end."""
    n = len(header)
    return len(columns) - len(added) <= n < len(columns) and tuple(header) == columns[:n]


def _migrate(fh, header: list[str], columns: tuple[str, ...]) -> None:
    """Rewrite the locked, open file with the new header, each row padded with empty cells."""
    fh.seek(0)
    rows = list(csv.reader(fh))[1:]
    pad = [""] * (len(columns) - len(header))
    fh.seek(0)
    fh.truncate()
    writer = csv.writer(fh, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(row + pad for row in rows if row)


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"
