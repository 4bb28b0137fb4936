"""Privacy accounting of the collector: what a result, a query and a dataset have spent.

See ``docs/privacy.md`` ("Shuffle mode: the central guarantee"). Pure functions over
public numbers, below the service (it imports nothing of ``uldp.collector`` but the
layers under it), so the service, the analyst's preview, the CLI and the benches share
one implementation:

* :mod:`.amplification` — the central (ε, δ) of shuffling n ε0-LDP reports (Feldman,
  McMillan and Talwar 2021): the closed form and the numerical bound.

This package's ``__init__`` imports nothing, so importing one module loads only it.
"""
