"""Issue 17 item 18: the README as a newcomer follows it.

* the set-up is exactly two commands, each making and using a venv (stock Debian/Ubuntu
  Python refuses ``pip install`` outside one, PEP 668);
* ``@uldp/device`` is not on npm: the README builds a package from the repository, and
  ``npm pack`` packs the built SDK (ES modules and CommonJS); uldp is not on PyPI: every
  ``pip install`` of it names the checkout or a built wheel;
* the web first run: the collector serves the built example page (``--dev-example``);
* the Python device snippet polls in a loop, so a two-stage device assigned to stage II
  reports once stage I has closed: run as written against a collector, every device of a
  two-stage query reports and the query finishes.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from opcli import REPO, uldp

README = (REPO / "README.md").read_text()


def _block_after(heading: str, lang: str) -> str:
    part = README[README.index(heading):]
    return re.search(rf"```{lang}\n(.*?)```", part, re.S).group(1)


def test_setup_is_two_commands_each_in_a_venv():
    block = _block_after("## Set up", "bash")
    cmds = [x for x in block.splitlines() if x.strip() and not x.lstrip().startswith("#")]
    assert len(cmds) == 2, cmds
    for cmd in cmds:
        assert "python3 -m venv .venv && . .venv/bin/activate && pip install -e " in cmd
    assert "uldp demo" in cmds[0] and "python -m pytest" in cmds[1]
    comments = [x for x in block.splitlines() if x.lstrip().startswith("# ")]
    assert sum("in a venv" in x for x in comments) == 2
    setup = README[README.index("## Set up"):README.index("```bash")]
    assert "PEP 668" in setup and "python3-venv" in setup


def test_typescript_sdk_is_installed_from_the_repository():
    assert "not published on npm" in README
    block = _block_after("not published on npm", "bash")
    assert "npm pack" in block and re.search(r"npm install \S+uldp-device-[\d.]+\.tgz", block)
    pkg = json.loads((REPO / "client-ts" / "package.json").read_text())
    assert "build/src" in pkg["files"] and "tsc" in pkg["scripts"]["prepack"]
    assert f"uldp-device-{pkg['version']}.tgz" in block
    ts = _block_after("not published on npm", "ts")
    assert "for (;;)" in ts and "await dev.poll()" in ts


def test_python_snippet_polls_until_two_stage_devices_report(collector, tmp_path):
    snippet = _block_after("An app embeds the SDK like this", "python")
    assert "while True:" in snippet and "dev.poll()" in snippet
    r = uldp("query", "create", *collector.conn(), "--kind", "mean", "--epsilon", "4",
             "--dataset", "steps", "--users", "6", "--samples", "5", "--method",
             "two-stage", "--id", "readme-2stage", "--json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["phases"]) == 2
    code = (snippet.replace('"collector.example:443"', repr(collector.target))
            .replace('ca_cert="ca.pem"', f'ca_cert={str(collector.pki / "ca.pem")!r}'))
    errors: list[BaseException] = []

    def device(i: int) -> None:
        try:
            g = np.random.default_rng(i)
            exec(code.replace('"/var/lib/myapp/uldp"', repr(str(tmp_path / f"dev{i}"))),
                 {"my_samples": g.uniform(0, 1, 5), "points": g.uniform(0, 1, (5, 2))})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=device, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    assert not errors and not any(t.is_alive() for t in threads), errors
    r = uldp("query", "status", *collector.conn(), "readme-2stage", "--json")
    q = json.loads(r.stdout)
    assert q["state"] == "done", q
    assert [p["received"] for p in q["phases"]] == [p["quota"] for p in q["phases"]]


@pytest.mark.skipif(shutil.which("npm") is None or
                    not (REPO / "client-ts" / "node_modules").is_dir(),
                    reason="needs npm and client-ts/node_modules (npm ci)")
def test_npm_pack_holds_the_built_sdk(tmp_path):
    r = subprocess.run(["npm", "pack", "--json", "--pack-destination", str(tmp_path)],
                       cwd=REPO / "client-ts", capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    files = {f["path"] for f in json.loads(r.stdout[r.stdout.index("["):])[0]["files"]}
    for entry in ("build/src/device/index.js", "build/src/node/index.js",
                  "build/src/core/index.js", "build/cjs/device/index.js",
                  "build/cjs/device/index.d.ts", "build/cjs/package.json", "package.json"):
        assert entry in files
    assert not any(f.startswith(("build/test", "node_modules")) for f in files)
    assert list(Path(tmp_path).glob("uldp-device-*.tgz"))


def test_install_lines_install_from_the_repository_or_a_built_wheel():
    """uldp is on no index: every ``pip install`` of it in the README and the docs names the
    checkout (``.``/``-e .``) or a wheel ``python -m build`` writes (its exact file name),
    with extras that exist; ``scripts/release_check.py`` (.ci/run) builds and installs both
    artifacts."""
    import tomllib

    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = set(meta["optional-dependencies"])
    wheel = f"dist/uldp-{meta['version']}-py3-none-any.whl"
    docs = [REPO / "README.md", REPO / "deploy" / "README.md", *(REPO / "docs").glob("*.md")]
    seen = 0
    for path in docs:
        for line in path.read_text().splitlines():
            for m in re.finditer(r"pip install (?:-[-\w]+ )*['\"]?([^\s'\"`]+)", line):
                spec = m.group(1)
                if not re.match(r"(\.|dist/|uldp)", spec):
                    continue  # another package (build, psycopg, ...)
                seen += 1
                assert not spec.startswith("uldp"), f"{path.name}: {line.strip()} (not on PyPI)"
                base, _, rest = spec.partition("[")
                assert base in (".", wheel), f"{path.name}: {line.strip()}"
                for extra in filter(None, rest.rstrip("]").split(",")):
                    assert extra in extras, f"{path.name}: unknown extra {extra!r}"
    assert seen >= 4
    assert f"uldp-{meta['version']}.tar.gz" in README and wheel in README


def test_web_first_run_block_matches_the_cli_and_the_build(capsys):
    from uldp.collector.cli.service import main

    block = _block_after("**The first run.**", "bash")
    assert "node scripts/build-example.mjs" in block and "--dev-example examples/web/dist" in block
    assert "/example/?autostart=1" in block and "--cors-origin" not in block
    build = (REPO / "client-ts/scripts/build-example.mjs").read_text()
    assert '"../../examples/web/"' in build and 'APP + "dist/"' in build
    with pytest.raises(SystemExit):
        main(["collector", "serve", "--help"])
    assert "--dev-example" in capsys.readouterr().out


def _readme_commands(prefix: str) -> list[str]:
    out = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.splitlines():
            if line.startswith(prefix):
                out.append(line.split("  #")[0].split(" # ")[0].strip())
    return out


@pytest.mark.parametrize("cmd", [c for c in _readme_commands("uldp ")
                                 if "examples/visits.csv" in c])
def test_readme_csv_command_runs_as_written(cmd):
    """Every README command on the sample file ``examples/visits.csv`` (a newcomer has no
    ``visits.csv`` of their own), run as written from the repository root. (The synthetic
    ``uldp simulate`` lines were run by hand for this issue; ``tests/test_cli_simulate.py``
    runs smaller versions of them.)"""
    import shlex

    r = uldp(*shlex.split(cmd)[1:], cwd=REPO, timeout=300)
    assert r.returncode == 0, (cmd, r.stderr[-2000:])
    assert "Traceback" not in r.stderr and r.stdout.strip()
    assert all(x.startswith(("uldp: ", "note: ")) for x in r.stderr.splitlines()), r.stderr
