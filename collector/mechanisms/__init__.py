"""Report mechanisms, collector half, registered by name (``docs/mechanisms.md``): the
decoders of the frequency oracles (``ORACLE_DECODERS``) and of the scalar randomizers
(``SCALAR_DECODERS``). The device half of each is the module of the same name in
``uldp.client.mechanisms``.
"""

from uldp.collector.mechanisms.base import OracleDecoder, ReportError, ScalarDecoder
from uldp.collector.mechanisms.duchi import DuchiDecoder
from uldp.collector.mechanisms.grr import GRRDecoder
from uldp.collector.mechanisms.hm import HMDecoder
from uldp.collector.mechanisms.laplace import LaplaceBinsDecoder, LaplaceValuesDecoder
from uldp.collector.mechanisms.olh import OLHDecoder
from uldp.collector.mechanisms.oue import OUEDecoder
from uldp.collector.mechanisms.pm import PMDecoder
from uldp.collector.mechanisms.ss import SSDecoder

__all__ = ["ORACLE_DECODERS", "SCALAR_DECODERS", "OracleDecoder", "ReportError",
           "ScalarDecoder"]

ORACLE_DECODERS: dict[str, OracleDecoder] = {
    d.name: d for d in (LaplaceBinsDecoder(), GRRDecoder(), OUEDecoder(), SSDecoder(),
                        OLHDecoder())}
SCALAR_DECODERS: dict[str, ScalarDecoder] = {
    d.name: d for d in (LaplaceValuesDecoder(), DuchiDecoder(), PMDecoder(), HMDecoder())}
