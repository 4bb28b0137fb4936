"""The device's public checks of a task, apart from the ledger: the parse and validation of a
task text (cached per digest for every device of the process) and the comparison with a
dataset's public declaration (code ``declaration``).

See ``docs/device-protocol.md`` §14.1 (the checks in order) and ``docs/privacy.md``
(totality: refusals look at public facts only). ``uldp.client.device.Device.check_task``
runs them in order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from uldp.client.dataset import DatasetSchema, LocalDataset
from uldp.client.kinds import KINDS, Kind, count_clamped, value_range
from uldp.client.kinds.grouped import group_of
from uldp.client.tasks import (
    TaskRefused,
    TaskSpec,
    report_length,
    task_epsilon_units,
    validate_task,
)

__all__ = ["check_by_declaration", "check_declaration", "check_groups_dataset", "clamp_note",
           "parsed_task", "report_labels"]


class _Parsed:
    """A task text's parse and public validation, shared by every device of this process
    (a pure function of the text; the per-device checks — dataset declaration, report
    length announced, ledger — still run for every task)."""

    __slots__ = ("_checked", "spec")

    def __init__(self, spec: TaskSpec) -> None:
        self.spec = spec
        self._checked: tuple[Kind, int, int] | None = None

    def validated(self) -> tuple[Kind, int, int]:
        """(kind, report length, ε units) of a task that passes ``validate_task``."""
        if self._checked is None:
            kind = validate_task(self.spec)
            self._checked = (kind, report_length(self.spec), task_epsilon_units(self.spec))
        return self._checked


_PARSED: dict[str, _Parsed] = {}
_PARSED_MAX = 1024


def parsed_task(text: str, digest: str) -> _Parsed:
    """The parse of task text ``text`` whose SHA-256 is ``digest`` (checked by the
    caller), cached by digest."""
    got = _PARSED.get(digest)
    if got is None:
        got = _Parsed(TaskSpec.from_json(text))
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[digest] = got
    return got


def check_declaration(task: TaskSpec, kind: Kind, schema: DatasetSchema) -> None:
    """Refuse (code ``declaration``) a task that contradicts the dataset's declaration."""
    why = _contradiction(task, kind, schema)
    if why:
        raise TaskRefused(why, code="declaration")


def check_groups_dataset(task: TaskSpec, datasets: Mapping[str, LocalDataset]) -> None:
    """A grouped mean (``by``): its groups' dataset must be registered (code ``dataset``)
    and declared as scalar categorical codes (code ``declaration``); public facts only."""
    if task.by is None:
        return
    by = datasets.get(task.by)
    if by is None:
        raise TaskRefused(f"dataset {task.by!r} (the task's groups) is not registered on "
                          "this device", code="dataset")
    check_by_declaration(task, by.schema)


def report_labels(task: TaskSpec, ds: LocalDataset, datasets: Mapping[str, LocalDataset]
                  ) -> np.ndarray | None:
    """The labels of the rows a report is computed on: the dataset's own, or for a grouped
    mean the device's group — :func:`~uldp.client.kinds.grouped.group_of` its groups'
    dataset (NaN, no group, if it is gone) — on every row (protocol §12.3)."""
    if task.by is None:
        return ds.labels
    by = datasets.get(task.by)
    g = group_of(by.samples, task.dim) if by is not None else float("nan")
    return np.full(len(ds.samples), g)


def clamp_note(task: TaskSpec, samples: np.ndarray) -> tuple[int, str] | None:
    """How many values the task's range clamps, and the local log line (None for a kind
    without a value range). A device keeps both to itself: nothing it sends depends on
    its data."""
    kind = KINDS.get(task.kind)
    if kind is None or kind.clamped is None:
        return None
    n = count_clamped(task, samples)
    lo, hi = value_range(task) or (math.nan, math.nan)
    return n, (f"query {task.query_id}: {n} of {np.size(samples)} values lay outside the "
               f"range [{lo:g}, {hi:g}] and were clamped into it (local only, never sent)")


def check_by_declaration(task: TaskSpec, schema: DatasetSchema) -> None:
    """Refuse (code ``declaration``) a grouped task whose groups' dataset (``by``) is not
    declared as scalar categorical codes of its ``dim`` groups."""
    name = schema.name
    why = ""
    if schema.dim not in (None, 1):
        why = f"dataset {name!r} holds {schema.dim}-dimensional samples; a group is one code"
    elif schema.values == "real":
        why = f"dataset {name!r} was declared real-valued; groups are categorical codes"
    elif schema.labelled:
        why = f"dataset {name!r} is labelled; groups are one code per sample"
    elif schema.alphabet is not None and schema.alphabet != task.dim:
        why = f"dataset {name!r} has {schema.alphabet} categories; the task has {task.dim} groups"
    if why:
        raise TaskRefused(why, code="declaration")


def _contradiction(task: TaskSpec, kind: Kind, schema: DatasetSchema) -> str:
    name = schema.name
    if kind.vector and schema.dim != task.dim:
        return (f"dataset {name!r} holds samples of dimension {schema.dim or 'scalar'}; "
                f"the task needs dimension {task.dim}")
    if not kind.vector and schema.dim not in (None, 1):
        return f"dataset {name!r} holds {schema.dim}-dimensional samples; kind " \
               f"{task.kind!r} needs scalars"
    if kind.uses_labels and not schema.labelled and not kind.grouped:
        return f"kind {task.kind!r} needs labelled samples; dataset {name!r} was " \
               "registered without labels"
    if task.kind == "distribution":
        if schema.values == "real":
            return f"dataset {name!r} was declared real-valued; a distribution task " \
                   "needs categorical values"
        if schema.alphabet is not None and schema.alphabet != task.dim:
            return f"dataset {name!r} has {schema.alphabet} categories; the task asks " \
                   f"about {task.dim}"
    elif schema.values == "categorical":
        return f"dataset {name!r} was declared categorical; kind {task.kind!r} needs " \
               "real values"
    return ""
