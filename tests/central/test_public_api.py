"""The public API of ``uldp.collector.central`` (issue 10): short imports, loaded lazily."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import uldp.collector.central as central


def test_all_lists_exactly_the_exports():
    assert sorted(central.__all__) == sorted(central._EXPORTS)


@pytest.mark.parametrize("name", central.__all__)
def test_every_public_name_imports_from_the_package(name):
    obj = getattr(central, name)
    home = importlib.import_module(f"uldp.collector.central.{central._EXPORTS[name]}")
    assert obj is getattr(home, name)


def test_the_estimators_of_the_docs_import_from_one_place():
    from uldp.collector.central import (  # noqa: F401
        CentralRelease,
        PrivacyRecord,
        adaptive_user_mean,
        hlm_mean,
        plan_clip_user,
        pmwm_mean,
        subsample_and_aggregate,
        subset_stats,
        user_mean,
        wme_mean,
    )


def test_no_public_name_is_also_a_submodule():
    """A submodule named like an exported function would shadow it (or be shadowed),
    depending on what was imported first."""
    submodules = {m.name for m in pkgutil.iter_modules(central.__path__)}
    assert not submodules & set(central.__all__)


def test_unknown_names_raise_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        central.nope  # noqa: B018


def test_the_cli_does_not_load_the_estimators():
    """``uldp`` imports ``uldp.collector.central.cli`` for every command; the estimators
    (and scipy.stats, which HLM needs) load only when a central release runs."""
    code = ("import sys, uldp.collector.central.cli; "
            "print(sorted(m for m in sys.modules if m.startswith('uldp.collector.central.') "
            "and m != 'uldp.collector.central.cli'), 'scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[] False"
