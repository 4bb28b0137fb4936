"""Benchmark: the collector's CPU per report for a shuffled batch, by stage, in process.

    python bench/shuffle_collector_cpu.py [--reports 20000] [--values 10] [--repeat 3]

What the collector does with a batch the shuffler forwards (``uldp.collector.service.
shuffled``), run in one process on a real SQLite database (WAL) with no network: per
report, thread CPU time (µs) of

* opening — RFC 9180 OpenBase of a report sealed with the production device function
  (``uldp.client.sealing.seal``), both with ``cryptography``'s ``hpke.Suite.decrypt`` (what
  the collector used before) and with ``uldp.client.hpke.BaseOpener`` (what
  ``open_reports`` uses now: the batch's key schedule once), and of that the X25519
  exchange alone (the floor no implementation of the device contract goes below);
* ``open_reports`` — opening plus the report checks, as each opening process runs it;
* digest — the SHA-256 a stored ciphertext is remembered by (``sealed_digest``);
* store — ``Database.store_batch_in`` of the whole batch in one transaction (replay check
  of the digests, the digests' insert, the report rows' insert, the phase's count).

CPU seconds, not wall-clock rates: the numbers hold on a loaded machine better than
rates do (best of ``--repeat`` runs). ``bench/shuffle_throughput.py`` measures the
processes as a whole, ``bench/shuffler_cpu.py`` the shuffler's stages.
"""

from __future__ import annotations

import argparse
import os
import secrets
import tempfile
import time
from pathlib import Path

import numpy as np
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from sqlalchemy import insert

from uldp.client.sealing import SealKey, open_reports, plaintext, seal, seal_info, suite
from uldp.collector.storage import open_database
from uldp.collector.storage import schema as S  # noqa: N812
from uldp.collector.storage.shuffle import ShuffledBatch, sealed_digest

try:  # absent before the collector had its own opener: run this file on an older tree
    from uldp.client.hpke import BaseOpener  # (PYTHONPATH) to compare the other stages
except ImportError:
    BaseOpener = None  # type: ignore[assignment,misc]

STAGES = [("opening: cryptography hpke.Suite.decrypt", "suite"),
          ("opening: BaseOpener.open", "opener"),
          ("  of it: X25519 exchange", "x25519"),
          ("open_reports (opening + report checks)", "open_reports"),
          ("digest of the ciphertext", "digest"),
          ("store (store_batch_in, one transaction)", "store")]


def _per(n: int, fn: object) -> float:
    t0 = time.thread_time()
    fn()  # type: ignore[operator]
    return (time.thread_time() - t0) / n * 1e6


def once(n: int, values: int) -> dict[str, float]:
    sk = X25519PrivateKey.generate()
    raw = sk.private_bytes_raw()
    key = SealKey.of(sk.public_key().public_bytes_raw())
    info = seal_info("bench", 1, 0, 0, "cd" * 32)
    rng = np.random.default_rng(1)
    sealed = [seal(key, info, plaintext(rng.integers(-1, 2, values), False))
              for _ in range(n)]
    m = min(n, 3000)  # the openings are per report: a sample is enough
    hpke = suite()
    encs = [X25519PublicKey.from_public_bytes(s[:32]) for s in sealed[:m]]
    out = {"suite": _per(m, lambda: [hpke.decrypt(s, sk, info=info) for s in sealed[:m]]),
           "x25519": _per(m, lambda: [sk.exchange(e) for e in encs])}
    if BaseOpener is not None:
        opener = BaseOpener(raw, info)
        out["opener"] = _per(m, lambda: [opener.open(s) for s in sealed[:m]])
    opened: list[bytes | None] = []
    out["open_reports"] = _per(n, lambda: opened.extend(
        open_reports(raw, info, values, 1, False, sealed)))
    assert all(p is not None for p in opened)
    digests: list[bytes] = []
    out["digest"] = _per(n, lambda: digests.extend(sealed_digest(s) for s in sealed))
    work = Path(tempfile.mkdtemp(prefix="uldp-bench-collector-cpu-"))
    db = open_database(f"sqlite:///{work / 'collector.db'}")
    try:
        with db.write() as conn:
            conn.execute(insert(S.phases).values(query_id="bench", phase=1, state="open",
                                                 quota=n))
        batch = ShuffledBatch("bench", secrets.token_hex(16), 1, 0, 0, n,
                              [p or b"" for p in opened], n, n, "v", digests)

        def store() -> None:
            with db.write() as conn:
                assert db.store_batch_in(conn, batch).stored == n
        out["store"] = _per(n, store)
    finally:
        db.dispose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=20_000)
    ap.add_argument("--values", type=int, default=10, help="values per report")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    runs = [once(a.reports, a.values) for _ in range(a.repeat)]
    best = {k: min(r[k] for r in runs) for k in runs[0]}
    print(f"Collector CPU per report of a shuffled batch, in process, {a.reports} reports of "
          f"{a.values} values, best of {a.repeat} runs per stage (load average "
          f"{os.getloadavg()[0]:.1f}; `python bench/shuffle_collector_cpu.py --reports "
          f"{a.reports} --values {a.values}`).\n")
    print("| stage | µs per report |\n|---|---|")
    for label, k in STAGES:
        print(f"| {label} | {best[k]:.1f} |" if k in best else f"| {label} | – |")


if __name__ == "__main__":
    main()
