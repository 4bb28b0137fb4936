"""Where a collector process's CPU goes, per thread role, for ``bench/ingest.py``.

Each collector replica runs a handful of thread roles: the gRPC front's event loop and its
relay threads (``uldp-grpc-front``, ``uldp-grpc-relay``), the aio server's loop
(``uldp-aio``), grpc-core's own threads, the group-commit writer (``uldp-writer``), the
phase closer, the RPC thread pool. :class:`StageCpu` reads every thread's CPU seconds from
``/proc/<pid>/task`` before and after a timed stage and sums them by role, so one replica
and two can be compared role by role (issue 28: two replicas cost more CPU per report than
one — which role pays?). A Python thread's role is its ``threading`` name, read once with
``py-spy dump`` when py-spy is installed (Python 3.11 does not hand names to the OS);
without it, Python threads other than the ones that name themselves count as ``python``.

With ``record=DIR``, every replica is also sampled by ``py-spy record`` during the stage
(collapsed stacks, ``DIR/<stage>-<pid>.txt``; read them with any flame-graph tool).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

__all__ = ["StageCpu", "replica_pids", "thread_cpu"]

_TCK = os.sysconf("SC_CLK_TCK")


def replica_pids(pid: int) -> list[int]:
    """``pid`` and its children (the sibling replicas of ``--processes N``), in pid order."""
    out = [pid]
    for d in Path("/proc").iterdir():
        try:
            if d.name.isdigit() and int((d / "stat").read_text().rsplit(")", 1)[1].split()[1]
                                        ) == pid:
                out.append(int(d.name))
        except (OSError, IndexError, ValueError):
            continue
    return sorted(out)


def thread_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """Each thread of ``pid``: tid -> (OS name, CPU seconds user + system)."""
    out: dict[int, tuple[str, float]] = {}
    task = Path(f"/proc/{pid}/task")
    try:
        tids = list(task.iterdir())
    except OSError:
        return out
    for t in tids:
        try:
            comm = (t / "comm").read_text().strip()
            st = (t / "stat").read_text().rsplit(")", 1)[1].split()
            out[int(t.name)] = (comm, (int(st[11]) + int(st[12])) / _TCK)
        except (OSError, IndexError, ValueError):
            continue
    return out


def python_names(pid: int) -> dict[int, str]:
    """tid -> ``threading`` name of ``pid``'s Python threads (py-spy dump; {} without)."""
    spy = shutil.which("py-spy")
    if spy is None:
        return {}
    try:
        text = subprocess.run([spy, "dump", "--nonblocking", "--pid", str(pid)],
                              capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    return {int(m.group(1)): m.group(2)
            for m in re.finditer(r'^Thread (\d+) \([^)]*\): "([^"]*)"', text, re.M)}


def role(name: str) -> str:
    """A thread's role from its name: numbered pool threads fold into one."""
    name = re.sub(r"[_-]\d+(_\d+)?$", "", name)
    return re.sub(r"\d+$", "", name) or name


class StageCpu:
    """CPU seconds per (replica, role) spent between ``start()`` and ``stop()``."""

    def __init__(self, root_pid: int, stage: str, record: Path | None = None) -> None:
        self.pids = replica_pids(root_pid)
        self.stage, self.record = stage, record
        self._names: dict[int, dict[int, str]] = {}
        self._before: dict[int, dict[int, tuple[str, float]]] = {}
        self._spies: list[subprocess.Popen[bytes]] = []
        self.by_role: list[dict[str, float]] = []

    def start(self) -> StageCpu:
        for p in self.pids:
            self._names[p] = python_names(p)
            self._before[p] = thread_cpu(p)
        spy = shutil.which("py-spy")
        if self.record is not None and spy is not None:
            self.record.mkdir(parents=True, exist_ok=True)
            for p in self.pids:
                self._spies.append(subprocess.Popen(
                    [spy, "record", "--nonblocking", "--threads", "--rate", "100",
                     "--format", "raw", "--pid", str(p),
                     "--output", str(self.record / f"{self.stage}-{p}.txt")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        return self

    def stop(self) -> StageCpu:
        for s in self._spies:
            s.send_signal(2)  # SIGINT: py-spy writes its file and exits
        for s in self._spies:
            try:
                s.wait(timeout=30)
            except subprocess.TimeoutExpired:
                s.kill()
                s.wait()
        for p in self.pids:
            # threads born during the stage (relays of new connections) may have died:
            # their CPU is in the process's total, not here — ``other`` takes the rest
            names = {**self._names[p], **python_names(p)}
            after = thread_cpu(p)
            roles: dict[str, float] = {}
            for tid, (comm, cpu) in after.items():
                was = self._before[p].get(tid, (comm, 0.0))[1]
                r = role(names.get(tid, comm))
                roles[r] = roles.get(r, 0.0) + cpu - was
            self.by_role.append(roles)
        return self

    def table(self, reports: int) -> str:
        """A markdown table: µs of CPU per report by role, one column per replica."""
        roles = sorted({r for d in self.by_role for r in d},
                       key=lambda r: -sum(d.get(r, 0.0) for d in self.by_role))
        head = "| role | " + " | ".join(f"replica {k}" for k in range(len(self.pids))) + \
            " | all |"
        lines = [f"{self.stage}: CPU µs per report by thread role", head,
                 "|---|" + "---:|" * (len(self.pids) + 1)]
        for r in roles:
            vals = [d.get(r, 0.0) for d in self.by_role]
            if sum(vals) * 1e6 / max(reports, 1) < 0.5:
                continue
            lines.append(f"| {r} | " + " | ".join(f"{1e6 * v / max(reports, 1):.1f}"
                                                  for v in vals)
                         + f" | {1e6 * sum(vals) / max(reports, 1):.1f} |")
        tot = [sum(d.values()) for d in self.by_role]
        lines.append("| **total** | " + " | ".join(f"{1e6 * v / max(reports, 1):.1f}"
                                                   for v in tot)
                     + f" | {1e6 * sum(tot) / max(reports, 1):.1f} |")
        return "\n".join(lines)
