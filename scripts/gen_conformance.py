#!/usr/bin/env python3
"""Write the device conformance vectors ``conformance/v1/*.json`` from the Python SDK.

    python scripts/gen_conformance.py           # (re)write conformance/v1/*.json
    python scripts/gen_conformance.py --check   # exit 1 if a committed file differs (CI)

Each file holds cases of one primitive of the device computation (keystream, uniform
integers, Bernoulli draws, ε arithmetic, discrete Laplace, randomized rounding, Algorithm-1
parameters, FWHT, stage-I and stage-II reports), computed by the production code of
``uldp.client`` on explicit 32-byte ChaCha20 keys. Every other SDK must reproduce every
case byte for byte; ``conformance/README.md`` documents the format. The output is a pure
function of this script and ``uldp.client``: a change of either that changes a file is a
change of the device contract and needs a new version directory (``v2``) unless it fixes a
bug in the generator itself.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import struct
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from uldp.client import noise
from uldp.client.hadamard import fwht
from uldp.client.mechanisms.two_stage import stage1_reports, stage2_reports
from uldp.client.params import Alg1Params, bin_index, bounded_params, heavy_tailed_params
from uldp.client.randomness import RandomSource

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conformance_mechanisms import MECHANISM_FILES
from conformance_seal import SEAL_FILES
from conformance_tasks import TASK_FILES

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "conformance" / "v1"
FORMAT = "uldp-conformance/1"
SAFE = 1 << 53


# ---- encoding helpers ------------------------------------------------------------------------
def f64(x: float) -> str:
    """IEEE-754 bit pattern of a double, 16 lowercase hex digits, big-endian."""
    return struct.pack(">d", float(x)).hex()


def key_for(name: str, i: int) -> bytes:
    return hashlib.sha256(f"uldp-conformance:{name}:{i}".encode()).digest()


def source(key: bytes) -> RandomSource:
    return RandomSource(key, simulation=True)


def next_word(rng: RandomSource) -> str:
    """The first keystream word after an operation: proves how many words it consumed."""
    return str(int(rng.words(1)[0]))


def ints(values: Any) -> list[int]:
    out = [int(v) for v in np.asarray(values).ravel()]
    if any(abs(v) >= SAFE for v in out):
        raise AssertionError("report integers must stay below 2^53 in the vectors")
    return out


def bigs(values: Any) -> list[str]:
    return [str(int(v)) for v in np.asarray(values).ravel()]


def params_obj(p: Alg1Params) -> dict[str, Any]:
    return {"bound": f64(p.bound), "bin_width": f64(p.bin_width), "margin": f64(p.margin),
            "bins": p.bins}


# ---- files -----------------------------------------------------------------------------------
def keystream() -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    keys = [bytes(32), bytes(range(32))] + [key_for("keystream", i) for i in range(3)]
    for key in keys:
        rng = source(key)
        head = rng.bytes(200)  # crosses 64-byte block boundaries
        rng2 = source(key)
        cases.append({"op": "bytes", "key": key.hex(), "skip": 0, "hex": head.hex()})
        cases.append({"op": "words", "key": key.hex(), "skip": 0,
                      "words": bigs(rng2.words(40))})
    for skip in (4090, 65533, 1 << 20):  # unaligned reads across internal buffer sizes
        rng = source(key_for("keystream-skip", skip))
        rng.bytes(skip)
        cases.append({"op": "bytes", "key": key_for("keystream-skip", skip).hex(),
                      "skip": skip, "hex": rng.bytes(72).hex()})
    return {"description": "ChaCha20 keystream (RFC 8439, 96-bit zero nonce, counter from 0) "
                           "read as bytes after skipping `skip` bytes, and as 64-bit "
                           "little-endian words", "cases": cases}


def keys() -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    for seed in (0, 1, 127, 128, 255, 256, 65535, 1 << 64, 12345678901234567890):
        k = hashlib.sha256(b"uldp-simulation-seed:"
                           + seed.to_bytes((seed.bit_length() + 8) // 8, "big")).digest()
        assert RandomSource.seeded(seed).bytes(32) == source(k).bytes(32)
        cases.append({"op": "seeded", "seed_int": str(seed), "key": k.hex()})
    for seed_s in ("", "abc", "mean-two-stage-1", "ü€😀"):
        k = hashlib.sha256(b"uldp-simulation-seed:" + seed_s.encode()).digest()
        assert RandomSource.seeded(seed_s).bytes(32) == source(k).bytes(32)
        cases.append({"op": "seeded", "seed_str": seed_s, "key": k.hex()})
    for i, label in enumerate(("report", "", "ü-label")):
        key = key_for("spawn", i)
        parent = source(key)
        child = parent.spawn(label)
        cases.append({"op": "spawn", "key": key.hex(), "label": label,
                      "child_words": bigs(child.words(4)), "next_word": next_word(parent)})
    return {"description": "key derivation: seeded(seed) and spawn(label)", "cases": cases}


_BELOW_SCALAR_NS = [1, 2, 3, 4, 5, 7, 8, 1 << 32, (1 << 32) + 1, 10**12 + 39, 1 << 62,
                    (1 << 62) + 1, 3 << 61, (1 << 63) - 1, (1 << 63) - (1 << 61) + 3]


def below() -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    for i, n in enumerate(_BELOW_SCALAR_NS):
        for size in (0, 1, 37):
            key = key_for(f"below-{n}-{size}", i)
            rng = source(key)
            out = rng.below(n, size=size)
            cases.append({"op": "scalar", "key": key.hex(), "n": str(n), "size": size,
                          "out": bigs(out), "next_word": next_word(rng)})
    arrays = [[1, 2, 3, 4], [1] * 5, [2, 4, 8, 16, 1 << 40],
              [3 << 61] * 24, [5, 3 << 61, 1, 7, (1 << 63) - 1, 3 << 61, 2, 3 << 61], []]
    for i, ns in enumerate(arrays):
        key = key_for("below-array", i)
        rng = source(key)
        out = rng.below(np.array(ns, dtype=np.uint64))
        cases.append({"op": "array", "key": key.hex(), "n": [str(n) for n in ns],
                      "out": bigs(out), "next_word": next_word(rng)})
    return {"description": "uniform integers below n: scalar n (size draws) and one per "
                           "entry of an array n", "cases": cases}


def bernoulli() -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    rational = [([0, 1, 1, 2, 3], [1, 1, 2, 4, 7]), ([1] * 16, [2] * 16),
                ([5, (1 << 62) - 1], [1 << 62, 1 << 62]), ([7] * 12, [(3 << 61)] * 12)]
    for i, (num, den) in enumerate(rational):
        key = key_for("bernoulli-rational", i)
        rng = source(key)
        out = rng.bernoulli_rational(np.array(num), np.array(den))
        cases.append({"op": "rational", "key": key.hex(), "num": [str(v) for v in num],
                      "den": [str(v) for v in den], "out": [bool(b) for b in out],
                      "next_word": next_word(rng)})
    tiny = 2.0**-60
    floats = [[0.0, 1.0, 0.5, 0.25, 1 - 2.0**-53, tiny, 5e-324, 2.0**-53, 0.1, 1 / 3],
              list(np.linspace(0, 1, 33)), [0.5] * 20]
    for i, ps in enumerate(floats):
        key = key_for("bernoulli-float", i)
        rng = source(key)
        out = rng.bernoulli_float(np.array(ps, dtype=np.float64))
        cases.append({"op": "float", "key": key.hex(), "p": [f64(p) for p in ps],
                      "out": [bool(b) for b in out], "next_word": next_word(rng)})
    return {"description": "Bernoulli(num/den) exact and Bernoulli(p) for a double p",
            "cases": cases}


EPSILONS = [2.0**-24, 2.0**-24 * (1 + 2.0**-52), 2.0**-25, 3 * 2.0**-26, 5e-324, 1e-3, 0.1,
            1 / 3, 0.5, 0.7, 1.0, 1.0 - 2.0**-53, 2.5, math.pi, 10.0, 1000.0, 2.0**20,
            2.0**20 + 2.0**-24, 2.0**20 * (1 + 2.0**-52),
            2.0**30 + 0.5, 1e12, 2.0**45, 1e300, 0.0, -1.0, math.inf, math.nan]
SENSITIVITIES = [1, 2, 3, 65536]


def epsilon() -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    for eps in EPSILONS:
        case: dict[str, Any] = {"op": "rational_epsilon", "epsilon": f64(eps)}
        try:
            r = noise.rational_epsilon(eps)
            case["numerator_2_24"] = str(r.numerator * ((1 << 24) // r.denominator))
        except ValueError:
            case["error"] = True
        cases.append(case)
    for eps in EPSILONS:
        for sens in SENSITIVITIES:
            case = {"op": "laplace_scale", "epsilon": f64(eps), "sensitivity": sens}
            try:
                s = noise.laplace_scale(sens, eps)
                case["num"], case["den"] = str(s.num), str(s.den)
            except ValueError:
                case["error"] = True
            cases.append(case)
    for sens in (1 << 40, (1 << 32) + 1):  # t >= 2^56 is refused
        for eps in (2.0**-24, 1.0, 2.0**20):
            case = {"op": "laplace_scale", "epsilon": f64(eps), "sensitivity": sens}
            try:
                s = noise.laplace_scale(sens, eps)
                case["num"], case["den"] = str(s.num), str(s.den)
            except ValueError:
                case["error"] = True
            cases.append(case)
    return {"description": "ε rounded down to a multiple of 2^-24 (numerator over 2^24) and "
                           "the discrete Laplace scale t = sensitivity/ε_r as a reduced "
                           "fraction num/den; `error` marks an input that must be refused",
            "cases": cases}


def dlap() -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    eps_list = [2.0**-24, 0.05, 0.5, 0.7, 1.0, 2.5, 8.0, 1000.0, 2.0**20 - 2.0**-24, 2.0**20]
    i = 0
    for eps in eps_list:
        for sens in (1, 2, 3, 65536):
            for count in (1, 40):
                key = key_for("dlap", i)
                i += 1
                rng = source(key)
                scale = noise.laplace_scale(sens, eps)
                out = noise.discrete_laplace(scale, count, rng)
                cases.append({"key": key.hex(), "epsilon": f64(eps), "sensitivity": sens,
                              "count": count, "out": ints(out), "next_word": next_word(rng)})
    key = key_for("dlap-zero", 0)
    rng = source(key)
    out = noise.discrete_laplace(noise.laplace_scale(2, 1.0), 0, rng)
    cases.append({"key": key.hex(), "epsilon": f64(1.0), "sensitivity": 2, "count": 0,
                  "out": ints(out), "next_word": next_word(rng)})
    return {"description": "count iid DLap(sensitivity/ε_r) integers (exact CKS sampler)",
            "cases": cases}


def rounding() -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    sets = [[0.0, 65536.0, 0.5, 1.5, 65535.999999999, 12345.678, 2.0**-30, 3.0],
            list(np.linspace(0, 65536, 41)), [-2.5, -0.0, 1e15 + 0.5, 7.25]]
    for i, xs in enumerate(sets):
        key = key_for("round", i)
        rng = source(key)
        out = noise.randomized_round(np.array(xs, dtype=np.float64), rng)
        cases.append({"key": key.hex(), "x": [f64(x) for x in xs], "out": ints(out),
                      "next_word": next_word(rng)})
    return {"description": "unbiased randomized rounding floor(x) + Bernoulli(x - floor(x))",
            "cases": cases}


def params() -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    bounded_in = [(1.0, 1, 1), (1.0, 4, 2), (1.0, 16, 1000), (1.0, 100, 20000),
                  (1.0, 6, 400), (0.5, 10, 3), (3.0, 1000, 10**6), (1e-3, 7, 5),
                  (1.0, 15, 1_000_000), (2.0, 64, 50_000), (1.0, 1 << 20, 1 << 30),
                  (1.0, 2, 0)]
    for bound, m, n_delta in bounded_in:
        p = bounded_params(bound, m, n_delta)
        cases.append({"op": "bounded", "bound": f64(bound), "m": m, "n_delta": n_delta,
                      "ln_n_delta": f64(math.log(max(n_delta, 2))), "params": params_obj(p)})
    heavy_in = [(3.0, 2.0, 6, 400, 0.7), (2.0, 1.0, 100, 10_000, 1.0),
                (2.5, 10.0, 1000, 10**6, 0.25), (4.0, 0.5, 1, 50, 2.0)]
    for p_, mom, m, n_run, eps_c in heavy_in:
        hp = heavy_tailed_params(p_, mom, m, n_run, eps_c)
        cases.append({"op": "heavy", "p": f64(p_), "moment": f64(mom), "m": m,
                      "n_run": n_run, "eps_c": f64(eps_c), "params": params_obj(hp),
                      "libm": {"scale": f64(mom ** (1.0 / p_)),
                               "ln_m": f64(math.log(m)) if m > 1 else None,
                               "tail": f64((mom**2 * max(n_run, 1) * eps_c**2)
                                           ** (1.0 / (2 * p_))),
                               "m_pow": f64(m ** (-(1.0 - 1.0 / p_)))}})
    # clamp intervals and bins for explicit parameters, including B = 1 and float-edge bins
    explicit = [bounded_params(1.0, 6, 400), bounded_params(1.0, 1, 1),
                Alg1Params(1.0, 2.0, 0.0, 1), Alg1Params(1.0, 0.1, 0.05, 20),
                Alg1Params(2.5, 0.3, 0.125, 17), heavy_tailed_params(3.0, 2.0, 6, 400, 0.7)]
    for p in explicit:
        cases.append({"op": "clamp_interval", "params": params_obj(p),
                      "intervals": [[f64(a) for a in p.clamp_interval(k)]
                                    for k in range(p.bins + 1)]})
        edges = [-p.bound + j * p.bin_width for j in range(p.bins + 1)]
        ys = ([-1e300, -p.bound, p.bound, 1e300, 0.0, -0.0, 5e-324]
              + edges + [np.nextafter(e, -np.inf) for e in edges]
              + [np.nextafter(e, np.inf) for e in edges])
        cases.append({"op": "bin_index", "params": params_obj(p), "y": [f64(y) for y in ys],
                      "bins": [int(b) for b in bin_index(np.array(ys), p)]})
    return {"description": "Algorithm-1 parameters (bounded, heavy-tailed), stage-II clamp "
                           "intervals for every k̂ in [0, B], and 1-based bin indices",
            "cases": cases}


def hadamard() -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    gen = np.random.default_rng(7)
    for K in (1, 2, 4, 8, 64, 256):
        for kind in ("normal", "onehot"):
            x = gen.standard_normal(K) if kind == "normal" else np.eye(K)[K // 3]
            x = x / math.sqrt(K) if kind == "normal" else x
            y = fwht(x[None], axis=-1)[0]  # one user: the device's own code path
            cases.append({"x": [f64(v) for v in x], "y": [f64(v) for v in y]})
    return {"description": "unnormalized Sylvester FWHT of one vector", "cases": cases}


def stage1() -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    p6 = bounded_params(1.0, 6, 400)
    one = Alg1Params(1.0, 2.0, 0.0, 1)
    heavy = heavy_tailed_params(3.0, 2.0, 6, 400, 0.7)
    setups: list[tuple[list[float], list[Alg1Params], float]] = [
        ([0.3], [p6], 0.7),
        ([-1.0], [p6], 0.7),
        ([1.0], [p6], 2.0**-24),
        ([1e300], [p6], 2.0**20),
        ([0.0], [one], 1.0),
        ([-p6.bound + 2 * p6.bin_width], [p6], 0.5),  # exactly on a bin edge
        ([0.1, -0.4, 0.99], [p6, bounded_params(1.0, 100, 20000), one], 0.25),
        ([5.0], [heavy], 0.7),
        ([0.2] * 4, [bounded_params(1.0, 16, 1000)] * 4, 8.0),
    ]
    for i, (y, ps, eps_c) in enumerate(setups):
        key = key_for("stage1", i)
        rng = source(key)
        out = stage1_reports(np.array([y], dtype=np.float64), ps, eps_c, rng)[0]
        cases.append({"key": key.hex(), "y": [f64(v) for v in y],
                      "params": [params_obj(p) for p in ps], "eps_c": f64(eps_c),
                      "report": ints(out), "next_word": next_word(rng)})
    return {"description": "stage-I report of one user: one-hot bins of each component plus "
                           "DLap(2/ε_c) per entry", "cases": cases}


def stage2() -> dict[str, Any]:
    cases: list[dict[str, Any]] = []
    p6 = bounded_params(1.0, 6, 400)
    p100 = bounded_params(1.0, 100, 20000)
    setups: list[tuple[list[float], list[tuple[float, float]], float]] = [
        ([0.3], [p6.clamp_interval(p6.bins // 2 + 1)], 0.7),
        ([0.3], [p6.clamp_interval(0)], 0.7),  # k̂ = 0: the whole support
        ([0.3], [p6.clamp_interval(p6.bins)], 0.7),  # k̂ = B
        ([0.3], [p6.clamp_interval(1)], 2.0**-24),
        ([-1e300], [(-1.0, 1.0)], 1.0),
        ([1.0], [(-1.0, 1.0)], 2.0**20),  # the top of the grid: exactly 2^16
        ([0.123456789], [(-0.5, 0.75)], 0.5),
        ([0.1, -0.2, 0.7], [p100.clamp_interval(k) for k in (3, 0, p100.bins)], 0.25),
        ([0.0] * 6, [(-1.0, 1.0)] * 6, 8.0),
    ]
    for i, (y, ivs, eps_c) in enumerate(setups):
        key = key_for("stage2", i)
        rng = source(key)
        out = stage2_reports(np.array([y], dtype=np.float64), ivs, eps_c, rng)[0]
        cases.append({"key": key.hex(), "y": [f64(v) for v in y],
                      "intervals": [[f64(a), f64(b)] for a, b in ivs], "eps_c": f64(eps_c),
                      "report": ints(out), "next_word": next_word(rng)})
    return {"description": "stage-II / SSL report of one user: clamp to the interval, "
                           "grid-encode to {0..2^16} with randomized rounding (one word per "
                           "component), then DLap(2^16/ε_c) per component", "cases": cases}


FILES: dict[str, Callable[[], dict[str, Any]]] = {
    "keystream": keystream, "keys": keys, "below": below, "bernoulli": bernoulli,
    "epsilon": epsilon, "dlap": dlap, "rounding": rounding, "params": params,
    "hadamard": hadamard, "stage1": stage1, "stage2": stage2, **TASK_FILES, **SEAL_FILES,
    **MECHANISM_FILES,
}


def render(name: str, body: dict[str, Any]) -> str:
    """Canonical text: header keys sorted, one case per line (compact, keys sorted)."""
    head = {"format": FORMAT, "name": name, "description": body["description"]}
    lines = [json.dumps(c, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                        allow_nan=False) for c in body["cases"]]
    text = json.dumps(head, sort_keys=True, ensure_ascii=False)[:-1]
    return text + ',\n"cases":[\n' + ",\n".join(lines) + "\n]}\n"


def generate() -> dict[str, str]:
    return {f"{name}.json": render(name, fn()) for name, fn in FILES.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="verify the committed vectors equal a fresh generation")
    args = ap.parse_args(argv)
    fresh = generate()
    if args.check:
        current = {p.name: p.read_text(encoding="utf-8") for p in OUT_DIR.glob("*.json")}
        stale = sorted(n for n in fresh.keys() | current.keys()
                       if fresh.get(n) != current.get(n))
        if stale:
            print(f"conformance vectors out of date: {', '.join(stale)} "
                  "(run python scripts/gen_conformance.py)", file=sys.stderr)
            return 1
        return 0
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for old in OUT_DIR.glob("*.json"):
        if old.name not in fresh:
            old.unlink()
    for name, text in fresh.items():
        (OUT_DIR / name).write_text(text, encoding="utf-8")
        print((OUT_DIR / name).relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
