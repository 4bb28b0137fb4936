"""Benchmark: interval coverage of shuffled queries (issue 25, item 8), beside the same
queries in the clear.

    python bench/shuffle_coverage.py [--reps 400] [--users 300] [--cells distribution,mean]
                                     [--out bench/results/shuffle_coverage.md] [--jsonl F]

Every repetition is a fresh query run through the production code in process — the
collector's logic (``CollectorCore`` over SQLite: CreateQuery, GetTasks with the shuffler
tickets, the phase closer and the estimator) and the shuffler's (``ShufflerServicer``'s
admission checks with its own attestation check, ``ShufflerStore``, the ``Forwarder``
drawing uniformly shuffled batches of at least the minimum, ``ShuffleIntake`` opening them
with HPKE). Only the network hops are replaced by direct calls. The devices' reports are
computed with the production batch kernels (``compute_reports``) on fresh data drawn from
the cell's population, and sealed with the production HPKE code.

Paired: every repetition sends the *same* reports, phase by phase, into a twin query in the
clear (``SubmitReport``'s validation and the group-commit writer; the twin's task checked to
be the same public task). Per repetition the bench checks that the shuffled path is
value-preserving (the multiset of the reports the collector stored equals the multiset the
devices computed: a shuffle is a permutation, nothing lost or added) and whether the
shuffled release (estimate and interval) is identical to its clear twin's. Printed per cell
and mode: the coverage of the 95 % intervals over every component (with a 95 % Wilson
interval on it), per component, the mean interval width and the mean error.
"""

from __future__ import annotations

import argparse
import json
import math
import secrets
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from uldp.client.randomness import RandomSource
from uldp.client.sealing import parse_seal, plaintext, seal, seal_info
from uldp.client.tasks import compute_reports
from uldp.client.taskspec import TaskSpec
from uldp.client.wire import shuffler_pb2
from uldp.collector.security.attestation import HmacAttestation, new_attestation_key
from uldp.collector.security.tokens import AdminAuth, TokenKey, new_admin_token
from uldp.collector.service.core import CollectorCore, CoreConfig
from uldp.collector.service.shuffled import ForwardedBatch
from uldp.collector.shuffler.service import (
    Forwarder,
    PhaseInfo,
    QueryInfo,
    ShufflerConfig,
    ShufflerServicer,
)
from uldp.collector.shuffler.store import Admission, ShufflerStore
from uldp.collector.simulation.fleet import dataset_for_query
from uldp.collector.storage.db import open_database

#: cell -> (kind, population, dim, epsilon, samples per user)
CELLS = {"mean": ("mean", "gaussian", 1, 1.0, 20),
         "distribution": ("distribution", "zipf:1.1", 4, 2.0, 20)}
MIN_BATCH = 100


class LocalLink:
    """The shuffler's link to the collector, as direct calls (no gRPC hop); the query's
    view is asked once per admission call and once per forwarder tick, as the real link's
    one-second cache would at this pace."""

    def __init__(self, core: CollectorCore) -> None:
        self.core, self.polls, self.stub = core, 0, self
        self.cache: dict[str, QueryInfo] = {}

    def query(self, query_id: str, fresh: bool = False) -> QueryInfo:
        if query_id in self.cache and not fresh:
            return self.cache[query_id]
        self.polls += 1
        q = self.core.shuffled.query(query_id)
        info = QueryInfo(q["shuffled"], q["min_batch"],
                         {p: PhaseInfo(s, d, quota, dec) for p, s, d, quota, dec in q["phases"]},
                         {(p, g, s): n for p, g, s, n, _ in q["cells"]}, q["users"],
                         {(p, g, s): k for p, g, s, _, k in q["cells"] if k})
        self.cache[query_id] = info
        return info

    def ForwardBatch(self, pieces: Any, timeout: float = 0) -> Any:
        it = iter(pieces)
        r = next(it)
        out = self.core.shuffled.forward(ForwardedBatch(
            r.batch_id, r.query_id, r.phase, r.group, r.stage, r.task_digest,
            list(r.sealed), r.attested, r.verifier, r.size), (list(x.sealed) for x in it))
        return shuffler_pb2.ForwardBatchResponse(duplicate=out.duplicate, stored=out.stored,
                                                 refused=out.refused)


@dataclass
class Rig:
    core: CollectorCore
    store: ShufflerStore
    servicer: ShufflerServicer
    forwarder: Forwarder
    attest: HmacAttestation


def _rig(work: Path) -> Rig:
    db = open_database(f"sqlite:///{work / 'collector.db'}")
    core = CollectorCore(db, TokenKey.generate(), AdminAuth(new_admin_token()),
                         CoreConfig(commit_linger_ms=0.0))
    store = ShufflerStore(work / "shuffler.db")
    link = LocalLink(core)
    attest = HmacAttestation(bytes.fromhex(new_attestation_key()))
    servicer = ShufflerServicer(store, core.tasks.ticket_key(), link, attest,  # type: ignore[arg-type]
                                "hmac-attestation")
    fwd = Forwarder(store, link, ShufflerConfig(min_batch=MIN_BATCH, linger_s=0.0),  # type: ignore[arg-type]
                    verifier_name="hmac-attestation")
    return Rig(core, store, servicer, fwd, attest)


def _reports(rig: Rig, qid: str, phase: int, X: np.ndarray, devices: list[str],
             rng_key: str) -> tuple[list[Any], Counter[bytes]]:
    """The tasks of ``phase`` for every device, and the reports computed for them (one
    batch per task): a list of (device, task, values) and the multiset of values."""
    answers = rig.core.get_tasks_many([(d, [qid], qid) for d in devices])
    by_task: dict[str, list[int]] = {}
    infos: dict[str, Any] = {}
    for i, a in enumerate(answers):
        assert not isinstance(a, Exception), a
        for t in a[0]:
            if t.phase == phase:
                by_task.setdefault(t.digest, []).append(i)
                infos.setdefault(t.digest, []).append(t)
    out, multiset = [], Counter()
    for digest, idx in by_task.items():
        spec = TaskSpec.from_json(infos[digest][0].task_json)
        vals = compute_reports(spec, X[idx], RandomSource.seeded(f"{rng_key}:{digest}"))
        for k, i in enumerate(idx):
            v = np.asarray(vals[k], dtype="<i8")
            out.append((devices[i], infos[digest][k], v))
            multiset[v.tobytes()] += 1
    return out, multiset


def _submit_shuffled(rig: Rig, reps: list[Any]) -> None:
    adms = []
    link: Any = rig.servicer.link
    link.cache.clear()
    keys: dict[str, Any] = {}
    for dev, t, v in reps:
        if t.digest not in keys:
            keys[t.digest] = parse_seal(TaskSpec.from_json(t.task_json).seal)
        sealed = seal(keys[t.digest], seal_info(t.query_id, t.phase, t.group, t.stage,
                                                       t.digest), plaintext(v, True))
        r = shuffler_pb2.SealedReport(query_id=t.query_id, phase=t.phase, group=t.group,
                                      stage=t.stage, task_digest=t.digest, sealed=sealed,
                                      ticket=t.ticket, attestation=rig.attest.issue(dev))
        adm = rig.servicer._admission(r)
        assert isinstance(adm, Admission), adm
        adms.append(adm)
    assert all(code == "OK" for code, _, _ in rig.store.submit(adms))
    for _ in range(1000):  # the forwarder's ticks until every batch is answered
        link.cache.clear()
        rig.forwarder.tick(wait=True)
        if not rig.store.buckets() and not rig.store.unsent():
            return
    raise RuntimeError("the shuffler never emptied")


def _submit_clear(rig: Rig, reps: list[Any]) -> None:
    items = []
    for dev, t, v in reps:
        p = rig.core.validate_report(dev, t.query_id, t.phase, [int(x) for x in v], t.digest,
                                     simulated=True)
        assert not hasattr(p, "code"), p
        items.append(p)
    assert all(o.code == "OK" for o in rig.core.store(items))


def _stored(rig: Rig, qid: str, phase: int) -> Counter[bytes]:
    from sqlalchemy import text

    with rig.core.db.read() as conn:
        rows = conn.execute(text("SELECT payload FROM uldp_reports WHERE query_id = :q AND "
                                 "phase = :p"), dict(q=qid, p=phase)).scalars().all()
    return Counter(bytes(r) for r in rows)


def _close(rig: Rig, qid: str, phase: int) -> None:
    """Close a phase whose quota is in (the service's closer does this on its tick)."""
    for _ in range(50):
        if rig.core.close_phase(qid, phase):
            return
        time.sleep(0.1)
    rows = {r["phase"]: r for r in rig.core.db.get_phases(qid)}
    raise RuntimeError(f"phase {phase} of {qid} did not close: {rows.get(phase)}")


def _public(task: Any) -> dict[str, Any]:
    """A task's public parameters less what names its query (id, sealing key)."""
    return {k: v for k, v in json.loads(task.task_json).items() if k not in ("query_id", "seal")}


def _create(rig: Rig, cell: str, users: int, qid: str, shuffled: bool) -> None:
    kind, _, dim, eps, m = CELLS[cell]
    params: dict[str, Any] = {"allow_simulated": True}
    if shuffled:
        params["shuffle"] = {"min_batch": MIN_BATCH, "delta": 1e-8}
    rig.core.create_query(kind=kind, epsilon=eps, dataset=qid, bound=1.0, samples=m,
                          users=users, dim=dim, method="", params_json=json.dumps(params),
                          phase_timeout_s=3600.0, query_id=qid)


def _outcome(rig: Rig, qid: str, truth: np.ndarray) -> dict[str, Any]:
    row = rig.core.db.get_query(qid)
    assert row is not None and row["state"] == "done", row
    est = json.loads(row["result_json"])
    lo, hi = np.asarray(est["ci_low"], float), np.asarray(est["ci_high"], float)
    value = np.asarray(est["values"], float).ravel()
    return {"covered": ((lo <= truth) & (truth <= hi)).tolist(), "width": (hi - lo).tolist(),
            "error": (value - truth).tolist(), "release": (value.tolist(), lo.tolist(),
                                                           hi.tolist())}


def one_rep(rig: Rig, cell: str, users: int, rep: int) -> dict[str, Any]:
    """One repetition, paired: a fresh population, its reports computed once, sent through
    the shuffler into a shuffled query and, the same values, in the clear into a twin
    query (the same public task in every phase, checked)."""
    kind, dist, dim, _, m = CELLS[cell]
    tag = f"{cell}-{rep}-{secrets.token_hex(3)}"
    qs, qc = f"s-{tag}", f"c-{tag}"
    _create(rig, cell, users, qs, True)
    _create(rig, cell, users, qc, False)
    data = dataset_for_query(kind, dist, m, dim, 1.0, 10_000 * rep + 7)
    X = data.draw(users)
    preserved = True
    rt = rig.core.runtime(qs)
    assert rt is not None
    quotas = {int(r["phase"]): int(r["quota"]) for r in rig.core.db.get_phases(qs)}
    for phase in range(1, rt.num_phases + 1):
        for _ in range(100):  # a new query is in the collector's running list within 0.25 s
            reps, computed = _reports(rig, qs, phase, X, [f"{qs}-{i}" for i in range(users)],
                                      f"{qs}:{phase}")
            if len(reps) == quotas[phase]:
                break
            time.sleep(0.05)
        assert len(reps) == quotas[phase], (qs, phase, len(reps), quotas[phase])
        _submit_shuffled(rig, reps)
        preserved &= _stored(rig, qs, phase) == computed
        _close(rig, qs, phase)
        for _ in range(100):
            twins = rig.core.get_tasks_many([(f"{qc}-{i}", [qc], qc) for i in range(users)])
            mine = [(f"{qc}-{i}", t) for i, a in enumerate(twins)
                    if not isinstance(a, Exception) for t in a[0] if t.phase == phase]
            if len(mine) == len(reps):
                break
            time.sleep(0.05)
        assert len(mine) == len(reps), (qc, phase, len(mine), len(reps))
        by_cell: dict[tuple[int, int], list[Any]] = {}
        for _, t, v in reps:
            by_cell.setdefault((t.group, t.stage), []).append((t, v))
        clear = []
        for dev, t in mine:
            t0, v = by_cell[(t.group, t.stage)].pop()
            assert _public(t0) == _public(t), "the twin query's task differs"
            clear.append((dev, t, v))
        _submit_clear(rig, clear)
        _close(rig, qc, phase)
    truth = np.asarray(data.truth, dtype=float).ravel()
    s, c = _outcome(rig, qs, truth), _outcome(rig, qc, truth)
    return {"shuffled": s, "clear": c, "preserved": preserved,
            "identical": s.pop("release") == c.pop("release")}


def _wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    p, z = k / n, 1.96
    c = (p + z * z / (2 * n)) / (1 + z * z / n)
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return c - h, c + h


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--users", type=int, default=300)
    ap.add_argument("--cells", default="distribution,mean")
    ap.add_argument("--out", default=None)
    ap.add_argument("--jsonl", default=None, help="append each (cell, mode) summary here")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="uldp-bench-shuffle-coverage-"))
    rig = _rig(work)
    rows = []
    t0 = time.perf_counter()
    try:
        for cell in a.cells.split(","):
            res = []
            for r in range(a.reps):
                res.append(one_rep(rig, cell, a.users, r))
                if a.jsonl:
                    with open(a.jsonl, "a") as f:
                        f.write(json.dumps({"cell": cell, "rep": r, **res[-1]}) + "\n")
                if (r + 1) % 50 == 0:
                    print(f"{cell}: {r + 1} repetitions ({time.perf_counter() - t0:.0f} s)",
                          flush=True)
            for mode in ("shuffled", "clear"):
                cov = np.array([x[mode]["covered"] for x in res], dtype=bool)
                k, n = int(cov.sum()), cov.size
                lo, hi = _wilson(k, n)
                rows.append({"cell": cell, "mode": mode, "reps": a.reps, "k": k, "n": n,
                             "coverage": k / n, "wilson": (lo, hi),
                             "per_component": cov.mean(axis=0).tolist(),
                             "width": float(np.mean([x[mode]["width"] for x in res])),
                             "error": float(np.mean([x[mode]["error"] for x in res])),
                             "preserved": all(x["preserved"] for x in res),
                             "identical": sum(x["identical"] for x in res)})
                print(f"{cell} {mode}: coverage {k / n:.3f} [{lo:.3f}, {hi:.3f}] over {n} "
                      f"intervals ({time.perf_counter() - t0:.0f} s)", flush=True)
    finally:
        rig.core.stop()
        rig.store.close()
    lines = [f"Interval coverage, shuffled and in the clear (`python bench/shuffle_coverage.py "
             f"--reps {a.reps} --users {a.users} --cells {a.cells}`): {a.users} users per "
             "query, nominal 95 %; a fresh population and fresh noise per repetition, the "
             "same reports sent through the shuffler and in the clear; every component's "
             "interval counts.", "",
             "| cell | mode | repetitions | intervals holding the truth | coverage (95 % "
             "Wilson) | per component | mean width | mean error | stored = computed | "
             "release identical to the clear twin's |",
             "|---|---|---|---|---|---|---|---|---|---|",
             *[f"| {r['cell']} | {r['mode']} | {r['reps']} | {r['k']} of {r['n']} | "
               f"{r['coverage']:.3f} [{r['wilson'][0]:.3f}, {r['wilson'][1]:.3f}] | "
               f"{', '.join(f'{c:.3f}' for c in r['per_component'])} | {r['width']:.4f} | "
               f"{r['error']:+.4f} | {'every rep' if r['preserved'] else 'NO'} | "
               f"{r['identical']} of {r['reps']} |"
               for r in rows], ""]
    print("\n".join(lines))
    if a.out:
        Path(a.out).write_text("\n".join(lines))


if __name__ == "__main__":
    main()
