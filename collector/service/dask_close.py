"""Closing a phase beyond one machine: the per-window reduction on a Dask cluster.

See ``docs/architecture.md`` ("Closing a phase") and ``deploy/README.md``. The same
:func:`uldp.collector.service.reduce.reduce_task` the in-process engine runs is mapped
over the phase's windows on the workers of a Dask distributed cluster (a scheduler
address in production, ``dask.distributed.LocalCluster`` in tests); each worker opens the
database itself (the URL travels with the task) and returns one partial accumulator per
group; the closer merges them **in window order**, so the result is the in-process
close's, bit for bit. Dask is an optional dependency: ``pip install 'uldp[scale]'``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from uldp.collector.errors import OperatorError
from uldp.collector.service.reduce import Partial, WindowTask, reduce_task
from uldp.collector.storage.db import Database

__all__ = ["DaskEngine", "dask_client"]


def dask_client(address: str, timeout_s: float = 15.0) -> Any:
    """A ``dask.distributed.Client`` of the scheduler at ``address`` (``tcp://host:8786``);
    :class:`OperatorError` naming ``--dask-scheduler`` when Dask is not installed or the
    scheduler cannot be reached."""
    try:
        from dask.distributed import Client
    except ImportError:  # pragma: no cover - the extra is installed in CI
        raise OperatorError("--dask-scheduler needs Dask: pip install 'uldp[scale]'") from None
    try:
        return Client(address, set_as_default=False, timeout=timeout_s)
    except (OSError, TimeoutError, ValueError) as exc:
        raise OperatorError(f"--dask-scheduler {address}: cannot reach the scheduler "
                            f"({exc})") from None


class DaskEngine:
    """Reduce a closing phase's windows on a Dask cluster (module docstring).

    ``client``: a ``dask.distributed.Client``; ``ahead``: windows in flight at most (their
    partials wait on the workers until the closer merges them, in order)."""

    def __init__(self, client: Any, ahead: int | None = None) -> None:
        self.client = client
        workers = len(client.scheduler_info().get("workers", {})) or 1
        self.ahead = ahead or 4 * workers

    def run(self, db: Database, tasks: Sequence[WindowTask],
            check: Callable[[], None]) -> Iterator[Partial]:
        pending: deque[Any] = deque()
        todo = iter(tasks)
        for t in todo:
            pending.append(self.client.submit(reduce_task, t, pure=False))
            if len(pending) >= self.ahead:
                break
        while pending:
            check()
            fut = pending.popleft()
            part = fut.result()
            fut.release()
            nxt = next(todo, None)
            if nxt is not None:
                pending.append(self.client.submit(reduce_task, nxt, pure=False))
            yield part

    def close(self) -> None:
        self.client.close()
