"""Shuffle mode: the independent shuffler service and the central guarantee it buys.

See ``docs/privacy.md`` ("Shuffle mode") and ``docs/device-protocol.md`` §16. Devices seal
their reports to the collector's HPKE key (``uldp.client.sealing``) and hand them to a
shuffler run by an independent party with the shuffler ticket of their slot
(``uldp.collector.security.tickets``; never their collector token); the shuffler admits one
report per slot — with its own enrolment check, only from attested devices — drops every
credential and forwards reports of one (query, phase, group, stage) in batches of at least
a public threshold, in uniformly random order, to the collector, which opens them without
ever learning which device sent which.

* :mod:`.store` — the shuffler's durable state (SQLite);
* :mod:`.service` — the gRPC service devices call, and the forwarder to the collector;
* :mod:`.server` — one shuffler process (``uldp shuffler serve``,
  ``uldp.collector.cli.shuffler``);
* :mod:`.metrics` — its aggregate Prometheus metrics (``GET /metrics``);
* :mod:`.launch` — a dev PKI for a collector and its shuffler, and starting a shuffler
  process (the demo, the tests, the bench).

The collector's half is ``uldp.collector.service.shuffled`` (opening batches, the
``privacy`` section of results), ``uldp.collector.service.intake`` (its shuffler port),
``uldp.collector.storage.shuffle`` and ``uldp.collector.security.sealkeys``; the central
(ε, δ) a shuffle buys is ``uldp.collector.accounting`` (pure, below the service).

This package's ``__init__`` imports nothing, so importing one module loads only it.
"""
