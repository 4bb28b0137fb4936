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


# ---- one fixed-size box per replica: a CPU quota of its own -------------------------------
#: where the cgroup v1 ``cpu`` controller or cgroup v2 lives on this kind of machine
CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")
CGROUP_V2 = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


#: cgroup ``cpu.shares`` of a replica's group (v2 ``cpu.weight`` = this · 100 / 1024): eight
#: nice-0 tasks' worth, so a replica reaches its quota on a busy box (the quota, not the
#: weight, caps what it takes). A group weighs as ONE task against every other task: at
#: the bench's nice 19 (weight 15) a replica of dozens of threads got 9 % of a 0.4-core
#: quota at load 15 (0 periods throttled), its calls took 20-30 s and the unary stage
#: failed — a starved replica, not a 0.4-core box
BOX_SHARES = 8192


def nice_weight(nice: int) -> int:
    """CFS's weight of a task at ``nice`` (1024 at 0, ×1.25 per step down), as cgroup
    ``cpu.shares`` (v1)."""
    return max(2, round(1024 / 1.25 ** nice))


class CpuQuota:
    """Each collector replica in a cgroup of its own with ``cores`` CPUs of quota per
    period (cgroup v1 ``cpu.cfs_quota_us`` or v2 ``cpu.max``) and a weight that lets it
    reach that quota (:data:`BOX_SHARES`): "one fixed-size box per replica" on a shared
    machine. PostgreSQL and the load generator stay outside.
    Needs root and a writable cpu controller;
    :meth:`check` says why not otherwise. ``use(pid, cpu_s, wall_s)``: the share of
    its quota a replica used (≈ 1 when the quota, not the box, bounds it)."""

    def __init__(self, cores: float, tag: str) -> None:
        self.cores, self.tag = cores, tag
        self.dirs: list[Path] = []
        self.v1 = (CGROUP_V1_CPU / "cpu.cfs_quota_us").exists()

    @staticmethod
    def check() -> str | None:
        """None when quotas can be set here, else the reason."""
        if (CGROUP_V1_CPU / "cpu.cfs_quota_us").exists():
            base = CGROUP_V1_CPU
        elif "cpu" in (CGROUP_V2 / "cgroup.subtree_control").read_text(errors="ignore") \
                if (CGROUP_V2 / "cgroup.subtree_control").exists() else False:
            base = CGROUP_V2
        else:
            return "no cgroup cpu controller (v1 cpu.cfs_quota_us or v2 cpu.max) here"
        return None if os.access(base, os.W_OK) else f"{base} is not writable (root?)"

    def apply(self, pids: list[int]) -> None:
        base = CGROUP_V1_CPU if self.v1 else CGROUP_V2
        weight = BOX_SHARES
        for k, pid in enumerate(pids):
            d = base / f"uldp-bench-{self.tag}-{k}"
            d.mkdir(exist_ok=True)
            if self.v1:
                (d / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (d / "cpu.cfs_quota_us").write_text(str(round(self.cores * PERIOD_US)))
                (d / "cpu.shares").write_text(str(weight))
            else:
                (d / "cpu.max").write_text(f"{round(self.cores * PERIOD_US)} {PERIOD_US}")
                (d / "cpu.weight").write_text(str(max(1, round(weight * 100 / 1024))))
            (d / "cgroup.procs").write_text(str(pid))  # every thread of the process
            self.dirs.append(d)

    def throttled(self) -> list[tuple[int, float]]:
        """Per replica: (periods throttled, seconds throttled) so far."""
        out = []
        for d in self.dirs:
            st = dict(line.split() for line in (d / "cpu.stat").read_text().splitlines()
                      if len(line.split()) == 2)
            if self.v1:
                out.append((int(st.get("nr_throttled", 0)),
                            int(st.get("throttled_time", 0)) / 1e9))
            else:
                out.append((int(st.get("nr_throttled", 0)),
                            int(st.get("throttled_usec", 0)) / 1e6))
        return out

    def remove(self) -> None:
        """Delete the groups (after the replicas exited; a live one is moved back)."""
        base = CGROUP_V1_CPU if self.v1 else CGROUP_V2
        for d in self.dirs:
            try:
                for pid in (d / "cgroup.procs").read_text().split():
                    (base / "cgroup.procs").write_text(pid)
                d.rmdir()
            except OSError:
                continue
