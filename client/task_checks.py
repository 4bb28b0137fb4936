"""The device's public checks of a task, apart from the ledger: the parse and validation of a
task text (cached per digest for every device of the process) and the comparison with a
dataset's public declaration (code ``declaration``).

See ``docs/device-protocol.md`` §14.1 (the checks in order) and ``docs/privacy.md``
(totality: refusals look at public facts only). ``uldp.client.device.Device.check_task``
runs them in order.
"""

from __future__ import annotations

from uldp.client.dataset import DatasetSchema
from uldp.client.kinds import Kind
from uldp.client.tasks import (
    TaskRefused,
    TaskSpec,
    report_length,
    task_epsilon_units,
    validate_task,
)

__all__ = ["check_declaration", "parsed_task"]


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


def _contradiction(task: TaskSpec, kind: Kind, schema: DatasetSchema) -> str:
    name = schema.name
    if kind.vector and schema.dim != task.dim:
        return (f"dataset {name!r} holds samples of dimension {schema.dim or 'scalar'}; "
                f"the task needs dimension {task.dim}")
    if not kind.vector and schema.dim not in (None, 1):
        return f"dataset {name!r} holds {schema.dim}-dimensional samples; kind " \
               f"{task.kind!r} needs scalars"
    if kind.uses_labels and not schema.labelled:
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
