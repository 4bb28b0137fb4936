"""Build the Python release artifacts and smoke-test each one as it installs (``.ci/run``).

    python scripts/release_check.py [--out DIR]

1. ``python -m build --no-isolation``: the sdist from the checkout, then the wheel from
   the unpacked sdist (so the wheel proves the sdist holds everything a build needs), with
   the build backend the ``[dev]`` extra installs (setuptools, wheel: no isolated build
   environment to make, nothing downloaded);
2. for each artifact, a fresh virtual environment (no ``uldp`` in it, never an editable
   install) that installs it with ``--no-deps`` — the dependencies come from this
   interpreter's site-packages, added to the venv's path by a ``.pth`` line, so nothing is
   downloaded or unpacked again — then ``pip check`` (every requirement the artifact
   declares is met), and the smoke test in that venv: ``uldp --help``, a tiny
   ``uldp simulate`` (from the wheel; the sdist installs the same code), and the package
   data a collector serves (the console's files, the wire's .proto files), each read from
   the installed copy, which must lie in the venv.

The npm tarball of ``@uldp/device`` is built and installed the same way by
``client-ts/scripts/package-check.mjs`` (``bash client-ts/ci.sh``). Exit 1 with the step
that failed; the artifacts stay in ``--out`` when given (else a temporary directory).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

SMOKE = r"""
import importlib.resources, pathlib, sys, uldp, uldp.client, uldp.collector
venv = pathlib.Path(sys.prefix).resolve()
for mod in (uldp.client, uldp.collector):
    where = pathlib.Path(mod.__file__).resolve()
    assert where.is_relative_to(venv), f"{mod.__name__} imported from {where}, not the venv"
console = importlib.resources.files("uldp.collector.http.console").joinpath("static")
assert all(len(console.joinpath(f).read_bytes()) > 500
           for f in ("index.html", "console.js", "console.css")), "console files missing"
protos = [p.name for p in importlib.resources.files("uldp.client.wire").iterdir()
          if p.name.endswith(".proto")]
assert {"device.proto", "analyst.proto"} <= set(protos), protos
print("installed in the venv; console and wire files present")
"""


def _run(cmd: list[str], what: str, **kw: object) -> str:
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-15:]
        raise SystemExit(f"release check: {what} failed ({' '.join(map(str, cmd[:4]))} ...):\n"
                         + "\n".join(tail))
    return str(r.stdout)


def _venv(root: Path, name: str) -> Path:
    """A venv without pip and without uldp, whose path ends with this interpreter's
    site-packages (the dependencies, not re-installed; their .pth files are not run, so an
    editable uldp of this interpreter stays out)."""
    env = root / name
    _run([sys.executable, "-m", "venv", "--without-pip", str(env)], f"venv {name}")
    py = env / "bin" / "python"
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                     "venv site").strip())
    (site / "_release_check_deps.pth").write_text(
        "\n".join(dict.fromkeys([sysconfig.get_paths()["purelib"],
                                 sysconfig.get_paths()["platlib"]])) + "\n")
    return py


def _smoke(py: Path, artifact: Path, tmp: Path, simulate: bool) -> str:
    pip = [sys.executable, "-m", "pip", "--python", str(py)]
    quiet = {"env": {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}}
    _run([*pip, "install", "-q", "--no-deps", "--no-build-isolation", str(artifact)],
         f"pip install {artifact.name}", **quiet)
    _run([*pip, "check"], f"pip check after {artifact.name}", **quiet)
    uldp = py.parent / "uldp"
    help_ = _run([str(uldp), "--help"], f"uldp --help from {artifact.name}", cwd=tmp)
    assert "simulate" in help_ and "collector" in help_, help_
    if simulate:
        out = _run([str(uldp), "simulate", "mean", "--users", "2000", "--samples", "10",
                    "--epsilon", "1", "--json"], f"uldp simulate from {artifact.name}", cwd=tmp)
        assert '"estimate"' in out, out[:300]
    return _run([str(py), "-c", SMOKE], f"package data of {artifact.name}", cwd=tmp).strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="keep the artifacts in this directory")
    a = ap.parse_args(argv)
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="uldp-release-"))
    out = Path(a.out).resolve() if a.out else tmp / "dist"
    try:
        _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)],
             "python -m build (sdist, then the wheel from it)",
             env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        sdist = next(out.glob("uldp-*.tar.gz"))
        wheel = next(out.glob("uldp-*.whl"))
        for p in (sdist, wheel):
            print(f"built {p.name}: {p.stat().st_size / 1024:.0f} KiB "
                  f"({time.monotonic() - t0:.0f} s)")
        for name, artifact in (("wheel", wheel), ("sdist", sdist)):
            said = _smoke(_venv(tmp, f"venv-{name}"), artifact, tmp, simulate=name == "wheel")
            print(f"ok {name} {artifact.name}: pip check, uldp --help"
                  f"{', uldp simulate' if name == 'wheel' else ''}; {said} "
                  f"({time.monotonic() - t0:.0f} s)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"release check: 2 passed, 0 failed ({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
