"""The one CSV reader of every ``uldp`` command that reads per-user rows.

``uldp central ...`` and ``uldp simulate KIND --data`` (``uldp.collector.simulation.own_data``) read
their files here, under one set of rules (README, "Your own data"):

* **Encoding**: UTF-8, with or without a byte-order mark (Excel's "CSV UTF-8" writes one);
  anything else is refused naming the row (line) and the byte where decoding failed.
* **Delimiter**: a comma. A header that is one column holding ``;`` or a tab (a
  spreadsheet's "CSV" in many locales) is refused with that hint.
* **Header**: the first row; names are compared after stripping surrounding whitespace.
* **Whitespace**: every cell is stripped, so ``u1``, ``u1 `` and `` u1`` are one user.
* **User ids and categories** (``--user-col``, ``--category-col``, ``--subset-col``):
  an empty cell is refused, naming the row and the column.
* **Numbers** (values, labels): an empty, non-numeric, NaN or infinite cell is refused,
  naming the row and the column; so is a value beyond ``max_abs`` when a command takes its
  range from the data (no ``--lo/--hi``: a ``1e308`` cell would make a range no query can
  state). Nothing is guessed and nothing is released from a file with a bad cell.
* **Public range**: values outside ``--lo/--hi`` are clamped into it, and how many were
  is said on stderr (:func:`clamp_to_range`; a count for the operator, never part of a
  release).

Rows are numbered as a spreadsheet shows them: the header is row 1.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["CsvColumns", "clamp_to_range", "read_csv_columns"]


@dataclass(frozen=True)
class CsvColumns:
    """The requested columns of a CSV file, one entry per data row."""

    path: str
    users: np.ndarray  # str, stripped, never empty
    numbers: dict[str, np.ndarray]  # float64, finite
    texts: dict[str, np.ndarray]  # str, stripped, never empty

    @property
    def rows(self) -> int:
        return int(self.users.size)


def _header(path: str, reader: Iterator[list[str]]) -> list[str]:
    try:
        first: list[str] = next(reader)
    except StopIteration:
        raise ValueError(f"{path}: empty file (expected a header row)") from None
    return [name.strip() for name in first]


def _number(path: str, row: int, col: str, text: str, max_abs: float | None = None
            ) -> float:
    if not text:
        raise ValueError(f"{path}: row {row}, column {col!r}: empty (every value must be a "
                         "number)")
    try:
        v = float(text)
    except ValueError:
        raise ValueError(f"{path}: row {row}, column {col!r}: {text!r} is not a number"
                         ) from None
    if not math.isfinite(v):
        raise ValueError(f"{path}: row {row}, column {col!r}: {text!r} is NaN or infinite")
    if max_abs is not None and abs(v) > max_abs:
        raise ValueError(f"{path}: row {row}, column {col!r}: {text!r} is beyond "
                         f"±{max_abs:.3g}, too large to take the range from the data; give the "
                         "public range with --lo/--hi (values outside it are clamped)")
    return v


def _delimiter_hint(header: list[str]) -> str:
    """A hint when the header looks like another delimiter's (one column holding one)."""
    if len(header) == 1:
        for sep, name in ((";", "semicolons"), ("\t", "tabs"), ("|", "bars")):
            if sep in header[0]:
                return (f"; the header is one column with {name}: the file seems to use "
                        f"{sep!r} as its delimiter, save it comma-separated (CSV with commas)")
    return ""


def _undecodable_row(p: Path) -> tuple[int, int]:
    """(row, byte offset in that row) of the first line that is not UTF-8 (rows numbered
    as a spreadsheet shows them: the header is row 1)."""
    with p.open("rb") as fh:
        for row, line in enumerate(fh, start=1):
            try:
                line.decode("utf-8-sig" if row == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                return row, exc.start
    return 0, 0


def read_csv_columns(path: str | Path, user_col: str, numeric: Sequence[str] = (),
                     text: Sequence[str] = (), max_abs: dict[str, float] | None = None
                     ) -> CsvColumns:
    """Read ``user_col``, the ``numeric`` columns and the ``text`` columns of a CSV file
    under the module's rules; every problem is a ``ValueError`` of one line. ``max_abs``:
    per numeric column, the largest magnitude a value may have (see the module
    docstring)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"no such CSV file: {path}")
    name = str(path)
    wanted = [user_col, *numeric, *text]
    try:
        with p.open(newline="", encoding="utf-8-sig") as fh:
            reader = csv.reader(fh)
            header = _header(name, reader)
            missing = [c for c in dict.fromkeys(wanted) if c not in header]
            if missing:
                raise ValueError(f"{name}: no column {', '.join(map(repr, missing))} "
                                 f"(columns: {', '.join(header)}){_delimiter_hint(header)}")
            at = {c: header.index(c) for c in wanted}
            users: list[str] = []
            nums: dict[str, list[float]] = {c: [] for c in numeric}
            txts: dict[str, list[str]] = {c: [] for c in text}
            for row, cells in enumerate(reader, start=2):
                if not any(c.strip() for c in cells):
                    continue  # a blank line
                cell = {c: (cells[i].strip() if i < len(cells) else "") for c, i in at.items()}
                for c in (user_col, *text):
                    if not cell[c]:
                        raise ValueError(f"{name}: row {row}: empty {c!r} (every row needs "
                                         f"its {'user id' if c == user_col else c})")
                users.append(cell[user_col])
                for c in numeric:
                    nums[c].append(_number(name, row, c, cell[c], (max_abs or {}).get(c)))
                for c in text:
                    txts[c].append(cell[c])
    except UnicodeDecodeError:
        bad_row, offset = _undecodable_row(p)
        raise ValueError(f"{name}: row {bad_row} is not UTF-8 text (byte {offset} of the row; a "
                         "Latin-1 or Windows-1252 file?); save the file as 'CSV UTF-8'"
                         ) from None
    if not users:
        raise ValueError(f"{name}: no data rows")
    return CsvColumns(name, np.asarray(users, dtype=str),
                      {c: np.asarray(v, dtype=np.float64) for c, v in nums.items()},
                      {c: np.asarray(v, dtype=str) for c, v in txts.items()})


def clamp_to_range(values: np.ndarray, lo: float, hi: float, flags: str = "--lo/--hi"
                   ) -> tuple[np.ndarray, str | None]:
    """``values`` clamped into ``[lo, hi]`` and, when any was outside, the note to print on
    stderr (how many, of how many; ``flags`` name where the range came from)."""
    v = np.asarray(values, dtype=np.float64)
    outside = int(np.count_nonzero((v < lo) | (v > hi)))
    if not outside:
        return v, None
    return np.clip(v, lo, hi), (f"{outside} of {v.size} values lie outside [{lo:g}, {hi:g}] "
                                f"({flags}) and were clamped into it")
