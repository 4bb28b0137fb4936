#!/usr/bin/env python3
"""Type-check the whole package with mypy (what ``.ci/run`` runs).

    python scripts/typecheck.py [extra mypy arguments]

The import names ``uldp.client`` and ``uldp.collector`` map onto the folders ``client/``
and ``collector/`` (see setup.py); mypy cannot follow setuptools' editable-install finder,
so this script lays the tree out as mypy expects — ``<tmp>/uldp/{client,collector}`` as
symbolic links to the checkout — and checks package ``uldp`` there with the settings of
``[tool.mypy]`` in pyproject.toml. Exits with mypy's status.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="uldp-mypy-") as tmp:
        pkg = Path(tmp) / "uldp"
        pkg.mkdir()
        for name in ("client", "collector"):
            os.symlink(ROOT / name, pkg / name)
        cmd = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
               "-p", "uldp", *argv]
        return subprocess.call(cmd, cwd=tmp)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
