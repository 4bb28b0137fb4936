"""Report mechanisms, device half, registered by name (``docs/device-protocol.md`` §17,
``docs/mechanisms.md``).

A task's ``mechanism`` field (default ``laplace``) names how its statistic becomes
integers; the device validates it and derives every probability itself (invariant 1):

* **frequency oracles** (``ORACLES``) for categorical values — stage-I bins of every kind,
  a sampled record's category (method ``oracle``): ``laplace`` (one-hot + discrete
  Laplace), ``grr``, ``oue``, ``ss``, ``olh``;
* **scalar randomizers** (``SCALARS``) for clamped values on the grid — stage II, SSL,
  baseline B: ``laplace`` (grid value + discrete Laplace), ``duchi``, ``pm``, ``hm``.

Adding a mechanism: one module here (design, sampler, exact probability), one module of the
same name in ``uldp.collector.mechanisms`` (debiasing, exact variance), and one line in
each registry.
"""

from uldp.client.mechanisms.base import FrequencyOracle, ScalarMechanism
from uldp.client.mechanisms.duchi import Duchi
from uldp.client.mechanisms.grr import GRR
from uldp.client.mechanisms.hm import HM
from uldp.client.mechanisms.laplace import LaplaceBins, LaplaceValues
from uldp.client.mechanisms.olh import OLH
from uldp.client.mechanisms.oue import OUE
from uldp.client.mechanisms.pm import PM
from uldp.client.mechanisms.ss import SS

__all__ = ["DEFAULT", "ORACLES", "SCALARS", "FrequencyOracle", "ScalarMechanism"]

#: the mechanism of a task without a ``mechanism`` field
DEFAULT = "laplace"

ORACLES: dict[str, FrequencyOracle] = {m.name: m for m in (LaplaceBins(), GRR(), OUE(), SS(),
                                                          OLH())}
SCALARS: dict[str, ScalarMechanism] = {m.name: m for m in (LaplaceValues(), Duchi(), PM(),
                                                          HM())}
