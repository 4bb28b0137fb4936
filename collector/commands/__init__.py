"""The service command groups of ``uldp``, one module each (registered by
``uldp.collector.service_cli``; the entry point is ``uldp.collector.cli``, which also holds
``uldp simulate``).

* ``collector`` — ``uldp collector serve|certs|health|wait`` (``serve``: the server's
  flags, checks and run loop);
* ``query`` — ``uldp query create|list|status|result|cancel`` (analyst);
* ``fleet`` — ``uldp fleet run`` (simulated devices over gRPC);
* ``demo`` — ``uldp demo``;
* ``common`` — what the service commands share (connection flags, output helpers).

``uldp central`` lives with its estimators (``uldp.collector.central.cli``). Every group
has ``register(subparsers)``; errors are :class:`uldp.collector.cliutil.OperatorError`
(one line, exit code 2), see ``uldp.collector.cliutil``.
"""
