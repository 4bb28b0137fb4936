"""Sealed reports (protocol §16): the HPKE construction, the vectors and the device rules.

* the reference HPKE (fixed ephemeral key) reproduces RFC 9180 Appendix A.2.1;
* the collector's ``BaseOpener`` opens exactly what ``cryptography``'s HPKE opens, to the
  same bytes (the vectors, random reports, and every tampering tried);
* every ``seal.json`` case opens with ``cryptography``'s HPKE and the recipient key, to the
  documented plaintext, and only with that key and that task's info;
* production sealing: a fresh ephemeral key per report, the fixed size 49 + 8·L;
* the device: a sealed task is refused without a shuffler before any charge, and the
  ledger stores (and every resend sends) the identical ciphertext.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from uldp.client.device import Device
from uldp.client.hpke import BaseOpener, seal_with_ephemeral
from uldp.client.sealing import (
    SealKey,
    open_plaintext,
    parse_seal,
    plaintext,
    seal,
    seal_info,
    sealed_length,
    suite,
)
from uldp.client.taskspec import TaskRefused, TaskSpec
from uldp.client.wire import device_pb2, shuffler_pb2

ROOT = Path(__file__).resolve().parents[2]
CASES = json.loads((ROOT / "conformance" / "v1" / "seal.json").read_text())["cases"]
h = bytes.fromhex


def test_reference_hpke_reproduces_rfc9180_a21():
    out = seal_with_ephemeral(
        h("4310ee97d88cc1f088a5576c77ab0cf5c3ac797f3d95139c6c84b5429c59662a"),
        h("4f6465206f6e2061204772656369616e2055726e"), h("436f756e742d30"),
        h("4265617574792069732074727574682c20747275746820626561757479"),
        h("f4ec9b33b792c372c1d2c2063507b684ef925b8c75a42dbcbf57d63ccd381600"))
    assert out.hex() == (
        "1afa08d3dec047a643885163f1180476fa7ddb54c6a8029ea33f95796bf2ac4a"
        "1c5250d8034ec2b784ba2cfd69dbdb8af406cfe3ff938e131f0def8c8b60b4db"
        "21993c62ce81883d2dd1b51a28")


def test_the_collectors_opener_opens_exactly_what_cryptography_opens():
    """``BaseOpener`` (the collector's OpenBase, a batch's key schedule computed once)
    against ``Suite.decrypt``: every vector, random reports of random lengths under random
    keys and infos, and each of them tampered with — a flipped bit in enc, ciphertext or
    tag, another info, another key, a truncation, low-order and non-canonical encs —
    opens in both to the same bytes or fails in both."""
    for case in CASES:
        opener = BaseOpener(h(case["recipient_private_key"]), h(case["info"]))
        assert opener.open(h(case["sealed"])) == h(case["plaintext"])
    rng = np.random.default_rng(25)
    low = [bytes(32), (1).to_bytes(32, "little"), (2**255 - 20).to_bytes(32, "little"),
           h("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800"),
           h("5f9c95bca3508c24b1d0b1559c83ef5b04445cc4581c8e86d8224eddd09f1157"),
           bytes([255] * 31 + [127])]
    for k in range(40):
        sk = X25519PrivateKey.generate()
        info = seal_info(f"q{k}", k, k % 3, 1, os.urandom(32).hex())
        data = os.urandom(int(rng.integers(1, 90)))
        sealed = seal(SealKey.of(sk.public_key().public_bytes_raw()), info, data)
        flip = bytearray(sealed)
        flip[int(rng.integers(0, len(sealed)))] ^= 1 << int(rng.integers(0, 8))
        tries = [(sk, info, sealed), (sk, info, bytes(flip)), (sk, info + b"x", sealed),
                 (X25519PrivateKey.generate(), info, sealed), (sk, info, sealed[:-1]),
                 (sk, info, sealed[:40]), (sk, info, low[k % len(low)] + sealed[32:])]
        outs = []
        for key, inf, blob in tries:
            try:
                want: bytes | None = suite().decrypt(blob, key, info=inf)
            except Exception:  # any failure: the opener must fail too
                want = None
            try:
                got: bytes | None = BaseOpener(key.private_bytes_raw(), inf).open(blob)
            except Exception:
                got = None
            assert got == want, (k, inf == info, len(blob))
            outs.append(got)
        assert outs[0] == data and outs[1:] == [None] * 6  # every tampering fails


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_vector_opens_with_the_collector_key_only(case):
    sk = X25519PrivateKey.from_private_bytes(h(case["recipient_private_key"]))
    key = parse_seal(case["seal"])
    assert key.public_key == sk.public_key().public_bytes_raw()
    info = seal_info(case["query_id"], case["phase"], case["group"], case["stage"],
                     case["task_digest"])
    assert info.hex() == case["info"]
    values = [int(v) for v in case["values"]]
    assert plaintext(values, case["simulated"]).hex() == case["plaintext"]
    sealed = h(case["sealed"])
    assert len(sealed) == sealed_length(len(values))
    opened = suite().decrypt(sealed, sk, info=info)
    vals, simulated = open_plaintext(opened)
    assert vals.tolist() == values and simulated == case["simulated"]
    other = X25519PrivateKey.generate()
    with pytest.raises(Exception):  # noqa: B017 - any failure: it must not open
        suite().decrypt(sealed, other, info=info)
    moved = seal_info(case["query_id"], case["phase"], case["group"] ^ 1, case["stage"],
                      case["task_digest"])
    with pytest.raises(Exception):  # noqa: B017 - replayed into another group
        suite().decrypt(sealed, sk, info=moved)


def test_production_seal_is_fresh_and_fixed_size():
    sk = X25519PrivateKey.generate()
    key = SealKey.of(sk.public_key().public_bytes_raw())
    info = seal_info("q", 1, 0, 2, "ab" * 32)
    a = seal(key, info, plaintext([1, -2, 3], False))
    b = seal(key, info, plaintext([1, -2, 3], False))
    c = seal(key, info, plaintext([2**40, -(2**40), 0], True))
    assert a != b and a[:32] != b[:32]  # fresh ephemeral key each time
    assert len(a) == len(b) == len(c) == sealed_length(3) == 49 + 24
    assert open_plaintext(suite().decrypt(c, sk, info=info))[1] is True


def test_malformed_plaintexts_are_recognised():
    assert open_plaintext(b"") is None
    assert open_plaintext(b"\x02" + bytes(8)) is None  # an unknown flag bit
    assert open_plaintext(b"\x00" + bytes(7)) is None  # not 1 + 8·L bytes


def _seal_task(key: SealKey | None, ticket: str = "t1.ticket") -> device_pb2.Task:
    spec = TaskSpec(query_id="q-s", kind="mean", method="ssl", stage=0, epsilon=1.0,
                    eps_c=1.0, components=(0,), bound=1.0, intervals=((-1.0, 1.0),),
                    seal=key.to_json() if key else None)
    text = spec.to_json()
    import hashlib
    return device_pb2.Task(query_id="q-s", phase=1, group=3, stage=0, dataset="x",
                           task_json=text, task_digest=hashlib.sha256(text.encode()).hexdigest(),
                           report_length=1, shuffle_ticket=ticket if key else "")


def test_a_task_without_seal_keeps_its_bytes():
    assert '"seal"' not in json.loads(json.dumps(_seal_task(None).task_json))
    with pytest.raises(TaskRefused) as e:
        TaskSpec.from_json(json.dumps({**json.loads(_seal_task(None).task_json), "seal": None}))
    assert e.value.code == "field"


def test_device_refuses_without_shuffler_and_stores_the_ciphertext(tmp_path):
    sk = X25519PrivateKey.generate()
    key = SealKey.of(sk.public_key().public_bytes_raw())
    task = _seal_task(key)
    dev = Device("unused:1", tmp_path / "a", budget=2.0, durable=False)
    dev.add_dataset("x", np.array([0.5, 0.25]))
    with pytest.raises(TaskRefused) as e:
        dev.prepare(task)
    assert e.value.code == "seal" and dev.ledger.get("q-s") is None  # nothing charged
    dev.close()
    dev = Device("unused:1", tmp_path / "b", budget=2.0, durable=False, shuffler="unused:2",
                 shuffler_attestation=lambda: "v1.fresh")
    dev.add_dataset("x", np.array([0.5, 0.25]))
    with pytest.raises(TaskRefused) as e:  # a sealed task without a ticket: nothing to show
        dev.prepare(_seal_task(key, ticket=""))  # the shuffler but a collector token
    assert e.value.code == "seal" and "ticket" in str(e.value)
    assert dev.ledger.get("q-s") is None
    rep = dev.prepare(task)
    assert isinstance(rep, shuffler_pb2.SealedReport)
    assert rep.ticket == "t1.ticket" and not rep.attestation  # the ledger holds no attestation
    assert dev.attested(rep).attestation == "v1.fresh" and dev.attested(rep).sealed == rep.sealed
    assert (rep.group, rep.stage, rep.phase) == (3, 0, 1)
    assert len(rep.sealed) == sealed_length(1)
    assert dev.prepare(task).sealed == rep.sealed  # the stored bytes, not a new seal
    assert dev.pending_reports()[0].sealed == rep.sealed
    info = seal_info("q-s", 1, 3, 0, task.task_digest)
    vals, simulated = open_plaintext(suite().decrypt(rep.sealed, sk, info=info))
    assert len(vals) == 1 and simulated is False
    dev.close()


def test_the_collector_opens_a_batch_in_order_and_drops_what_fails(monkeypatch):
    """``open_reports`` keeps the order and drops, one by one, a forgery, a report of
    another length, a simulated one where not allowed, one over the limit (−2⁶³ too) and
    one with an unknown flag bit; a large
    batch opened by the pool of processes gives the same list."""
    import uldp.collector.service.shuffled as sh
    from uldp.client.sealing import open_reports

    sk = X25519PrivateKey.generate()
    key = SealKey.of(sk.public_key().public_bytes_raw())
    info = seal_info("q", 1, 0, 0, "ab" * 32)
    good = [seal(key, info, plaintext([i, -i], False)) for i in range(6)]
    bad = [os.urandom(len(good[0])), seal(key, info, plaintext([1, 2, 3], False)),
           seal(key, info, plaintext([1, 1], True)), seal(key, info, plaintext([99, 0], False)),
           seal(key, info, plaintext([-2**63, 0], False)),  # |−2⁶³| overflows int64
           seal(key, info, b"\x02" + bytes(16))]  # an unknown flag bit
    raw = sk.private_bytes_raw()
    got = open_reports(raw, info, 2, 50, False, good[:3] + bad + good[3:])
    want = [np.array([i, -i], dtype="<i8").tobytes() for i in range(6)]
    assert got == want[:3] + [None] * 6 + want[3:]
    assert open_reports(raw, info, 2, 50, True, bad[2:3]) == [np.array([1, 1], "<i8").tobytes()]
    monkeypatch.setattr(sh, "PARALLEL_OPEN", 4)
    intake = sh.ShuffleIntake.__new__(sh.ShuffleIntake)
    intake._pool, intake._pool_lock = None, threading.Lock()
    try:
        opening = sh._Opening(intake._openers(), raw, info, 2, 50, False)
        opening.add(good[:4])  # two pieces, as a streamed batch: jobs over the pool
        opening.add(good[4:] + bad + good[:2])  # copies of a ciphertext: opened once
        assert opening.result() == want + [None] * 6
        assert intake._pool is not None or (os.cpu_count() or 1) < 2
    finally:
        intake.close()
