"""Contract edge cases of ``conformance/v1`` (issue 17): the JSON value model of a task text
(protocol §11.1), the numeric strings of dataset registration (§13.1) and the transport's
retry rule (§10). Imported by ``scripts/conformance_tasks.py``; the cases are computed by the
production code there (the device's checks, ``coerce_values``, ``uldp.client.transport``).
"""

from __future__ import annotations

from typing import Any

import grpc

__all__ = ["json_edge_texts", "numeric_strings", "transport"]


def _nest(levels: int) -> str:
    """An ``extra`` value that makes the task object's deepest container level ``levels``."""
    inner = levels - 2  # the task object is level 1, ``extra`` level 2
    return "{" + '"a":' + "[" * inner + "]" * inner + "}"


def json_edge_texts(base: str) -> list[tuple[str, str]]:
    """(name, task text) variants of the canonical text ``base`` of an accepted SSL mean
    task: each exercises one rule of the JSON value model."""
    def sub(old: str, new: str) -> str:
        assert old in base, old
        return base.replace(old, new, 1)

    eps, stage, dim = '"epsilon":1.0', '"stage":0', '"dim":1'
    return [
        ("json-ws-around", " \t\n\r" + base + "\r\n "),
        ("json-ws-nbsp", "\u00a0" + base),
        ("json-bom", "\ufeff" + base),
        ("json-trailing-data", base + "x"),
        ("json-second-value", base + " {}"),
        ("json-trailing-comma", base[:-1] + ",}"),
        ("json-number-plus", sub(eps, '"epsilon":+1.0')),
        ("json-number-leading-zero", sub(eps, '"epsilon":01.0')),
        ("json-number-bare-dot", sub(eps, '"epsilon":1.')),
        ("json-number-dot-first", sub(eps, '"epsilon":.5')),
        ("json-number-minus-alone", sub(eps, '"epsilon":-')),
        ("json-minus-nan", sub(eps, '"epsilon":-NaN')),
        ("json-lowercase-infinity", sub(eps, '"epsilon":infinity')),
        ("json-minus-infinity", sub(eps, '"epsilon":-Infinity')),
        ("json-exponent-capital", sub(eps, '"epsilon":1E0')),
        ("json-exponent-plus", sub(eps, '"epsilon":0.1e+1')),
        ("json-integer-for-number", sub(eps, '"epsilon":1')),
        ("json-exponent-overflow", sub(eps, '"epsilon":1e999999999999')),
        ("json-exponent-underflow", sub(eps, '"epsilon":1e-400')),
        ("json-float-5000-digits", sub(eps, '"epsilon":1.' + "0" * 5000)),
        ("json-minus-zero-integer", sub(stage, '"stage":-0')),
        ("json-exponent-for-integer", sub(stage, '"stage":0e0')),
        ("json-integer-4300-digits", sub(dim, '"dim":1' + "0" * 4299)),
        ("json-integer-4301-digits", sub(dim, '"dim":1' + "0" * 4300)),
        ("json-integer-4301-digits-negative", sub(dim, '"dim":-1' + "0" * 4300)),
        ("json-duplicate-key-first", sub(eps, '"epsilon":-1.0,' + eps)),
        ("json-duplicate-key-last", sub(eps, eps + ',"epsilon":-1.0')),
        ("json-escaped-key", sub(eps, '"\\u0065psilon":1.0')),
        ("json-control-char", sub('"query_id":"q-mean"', '"query_id":"q-\x01mean"')),
        ("json-escaped-control", sub('"query_id":"q-mean"', '"query_id":"q-\\u0001mean"')),
        ("json-lone-surrogate", sub('"query_id":"q-mean"', '"query_id":"q-\\ud800"')),
        ("json-bad-escape", sub('"query_id":"q-mean"', '"query_id":"q-\\xmean"')),
        ("json-depth-64", sub('"extra":{}', '"extra":' + _nest(64))),
        ("json-depth-65", sub('"extra":{}', '"extra":' + _nest(65))),
        ("json-depth-65-in-string", sub('"extra":{}', '"extra":{"a":"' + "[" * 100 + '"}')),
    ]


#: Strings an app may pass as sample values: the numeric-string grammar of §13.1 (ASCII
#: only) at its edges. Python's own float() takes some that the contract does not.
NUMERIC_STRINGS = [
    "1.5", " 2 ", "\t\n3\r\x0b\x0c", "-3e2", "1.5E+3", "+.5e-3", "5.", "-0", "00012",
    "1_000", "1_000.000_1", "0_1", "1e1_0", "1__0", "_1", "1_", "1_.5", "1._5", "1e_5", "1_e5",
    "inf", "-Infinity", "infinITY", "+nan", "-nan", "NaN", "in f", "infinit", "nan(1)",
    "1e309", "-1e-400", "9007199254740993.0000000000001", "0x10", "0x1p3", "1,5", "1e", "e5",
    ".", "+-1", "", "   ", "\x1c12", "\u00a012", "12\u2003", "\ufeff12", "\u0661\u0662",
    "\uff11\uff12", "\u22121", "12\u0085",
]


def numeric_strings() -> list[tuple[str, Any, Any, int | None]]:
    """Registration cases (name, samples, labels, dim) of the numeric-string edges."""
    return [("numeric-strings-edges", list(NUMERIC_STRINGS), None, None),
            ("numeric-strings-labels", [0.5] * 4, ["1", "\u0661", " -1 ", "1_0"], None),
            ("numeric-strings-vectors", [["1", "2_0"], ["\u0661", "3"], [" 4 ", "inf"]],
             None, 2)]


def transport() -> dict[str, Any]:
    """Every gRPC status code and whether a device retries it (protocol §10)."""
    from uldp.client.transport import RETRYABLE

    cases = [{"code": c.value[0], "name": c.name, "retried": c in RETRYABLE}
             for c in sorted(grpc.StatusCode, key=lambda c: c.value[0])]
    return {"description": "the retry rule: every gRPC status code (number, name) and "
                           "whether a device retries the identical request (true) or takes "
                           "it as the collector's definitive answer (false)", "cases": cases}
