"""A collector and simulated devices on loopback, for tutorials, notebooks and doctests.

See ``docs/analyst.md``. :meth:`Sandbox.start` writes a development CA, a server
certificate and an admin token to a private temporary directory and starts a real
collector (TLS, a SQLite file, the gRPC port and, with ``http=True``, the HTTP port with
``/metrics`` and the console) in this process; :meth:`Sandbox.fleet` runs simulated
devices — production :class:`uldp.client.Device` objects with production randomness —
that hold a dataset and report to whatever query asks for it (their reports are marked
simulated, which this collector accepts: ``--allow-simulated``). Nothing listens beyond
127.0.0.1; :meth:`Sandbox.stop` removes everything.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Sandbox"]


@dataclass
class Sandbox:
    """A running loopback collector (see the module docstring)."""

    directory: Path
    server: Any
    ca: Path  # the CA certificate that signed the collector's
    front: Any = None
    _fleets: int = 0

    @classmethod
    def start(cls, http: bool = False) -> Sandbox:
        from uldp.collector.security.certs import make_dev_pki
        from uldp.collector.security.files import write_private
        from uldp.collector.security.tokens import new_admin_token
        from uldp.collector.service.core import CoreConfig
        from uldp.collector.service.server import CollectorServer, ServerConfig

        d = Path(tempfile.mkdtemp(prefix="uldp-sandbox-"))
        pki = make_dev_pki(d / "pki", ["localhost", "127.0.0.1"])
        write_private(d / "pki" / "admin.token", (new_admin_token() + "\n").encode())
        srv = CollectorServer(ServerConfig(
            db_url=f"sqlite:///{d / 'collector.db'}", tls_cert=pki.server_cert,
            tls_key=pki.server_key, port=0, admin_token_file=d / "pki" / "admin.token",
            name="sandbox", core=CoreConfig(allow_simulated=True)))
        srv.start()
        box = cls(d, srv, pki.ca_cert)
        if http:
            from uldp.collector.http import HttpConfig, attach_front

            box.front = attach_front(srv.core, srv.executor,
                                     HttpConfig(pki.server_cert, pki.server_key, port=0))
            box.front.start()
        return box

    @property
    def target(self) -> str:
        """``host:port`` of the gRPC port."""
        return f"127.0.0.1:{self.server.port}"

    @property
    def http_url(self) -> str:
        """``https://127.0.0.1:port`` of the HTTP port (``start(http=True)``)."""
        if self.front is None:
            raise RuntimeError("the sandbox was started without its HTTP port")
        return f"https://127.0.0.1:{self.front.port}"

    @property
    def admin_token(self) -> str:
        return (self.directory / "pki" / "admin.token").read_text().strip()

    def fleet(self, dataset: str, kind: str, users: int, samples: int, dim: int = 1,
              dist: str = "uniform", bound: float | None = 1.0, seed: int = 0,
              concurrency: int = 16, lo: float | None = None,
              hi: float | None = None) -> int:
        """Run ``users`` simulated devices holding ``dataset`` (drawn from the population
        ``dist`` of ``kind``, as ``uldp fleet run --dist``; the learning kinds take
        their own populations, e.g. ``sine``) until none has anything left to do;
        the number of reports they sent. ``lo``/``hi``: the devices' values lie in that
        range (instead of ``[-bound, bound]``)."""
        from uldp.client.transport import Endpoint
        from uldp.collector.simulation.fleet import FleetDataset, dataset_for_query, run_fleet

        self._fleets += 1
        learning = kind in ("classify", "regress", "sgd")
        centre = 0.0
        if lo is not None and hi is not None:
            bound, centre = hi / 2 - lo / 2, lo / 2 + hi / 2
        data = dataset_for_query(kind, "" if learning and dist == "uniform" else dist,
                                 samples, dim, bound, seed, centre=centre)
        res = run_fleet(Endpoint(self.target, self.ca),
                        self.directory / f"fleet-{self._fleets}", users,
                        [FleetDataset(dataset, data)], concurrency=concurrency,
                        progress=False, keep_state=False, timeout_s=600)
        if res.errors or res.rejected:
            raise RuntimeError(f"fleet: {[*res.errors, *res.rejected][:3]}")
        return res.submitted

    def stop(self) -> None:
        if self.front is not None:
            self.front.stop(grace=1.0)
            self.front = None
        self.server.stop(grace=1.0)
        shutil.rmtree(self.directory, ignore_errors=True)
