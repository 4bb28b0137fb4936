"""The learning queries' public math, below the query programs that run them.

See ``docs/architecture.md`` ("Layers") and ``docs/algorithms.md`` ("Learning"). Modules:

* ``sgd`` — Algorithm 3's configuration (:class:`~uldp.collector.models.sgd.SGDConfig`),
  its rounds, steps and the query spec of one step (§8);
* ``windows`` — the clipping window of every SGD round, sized from what the earlier
  rounds saw, and the per-coordinate supports of the built-in gradients (§8.3);
* ``grid`` — Algorithms 4–5's grid choice and fitted grid models (§9, §10).

``uldp.collector.programs`` runs these as phase programs; ``uldp.collector.learning``
(fits, scikit-style estimators, datasets, the CLI) sits above both.
"""
