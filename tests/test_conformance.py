"""The committed device conformance vectors (``conformance/v1``) are exactly what the Python
SDK computes today: regenerating them gives identical files, byte for byte.

The TypeScript SDK checks the same files (``client-ts``, node and headless Chromium), so a
change of the device computation on either side fails CI until the contract is versioned.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import gen_conformance  # noqa: E402

FRESH = gen_conformance.generate()


def test_the_generator_covers_every_committed_file_and_no_more():
    committed = sorted(p.name for p in gen_conformance.OUT_DIR.glob("*.json"))
    assert committed == sorted(FRESH)


@pytest.mark.parametrize("name", sorted(FRESH))
def test_committed_vectors_equal_a_fresh_generation(name):
    committed = (gen_conformance.OUT_DIR / name).read_text(encoding="utf-8")
    assert committed == FRESH[name], (
        f"conformance/v1/{name} differs from what uldp.client computes now: "
        "run python scripts/gen_conformance.py and version the contract")


def test_check_mode_passes_on_the_committed_tree():
    assert gen_conformance.main(["--check"]) == 0


@pytest.mark.parametrize("name", sorted(FRESH))
def test_every_file_is_well_formed(name):
    data = json.loads(FRESH[name])
    assert data["format"] == "uldp-conformance/1"
    assert data["name"] == Path(name).stem
    assert data["cases"], "a vector file without cases"


def test_check_mode_detects_a_changed_vector(tmp_path, monkeypatch):
    for name, text in FRESH.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    case = json.loads(FRESH["stage1.json"])["cases"][0]
    bumped = dict(case, report=[v + 1 for v in case["report"]])
    text = FRESH["stage1.json"].replace(
        json.dumps(case, sort_keys=True, separators=(",", ":"), ensure_ascii=False),
        json.dumps(bumped, sort_keys=True, separators=(",", ":"), ensure_ascii=False))
    assert text != FRESH["stage1.json"]
    (tmp_path / "stage1.json").write_text(text, encoding="utf-8")
    monkeypatch.setattr(gen_conformance, "OUT_DIR", tmp_path)
    assert gen_conformance.main(["--check"]) == 1
