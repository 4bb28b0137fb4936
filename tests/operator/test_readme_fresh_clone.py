"""Issue 29 item 6: the README's commands work in a fresh clone — every file or directory of
the repository they use is committed (``git ls-tree HEAD``, what a clone has), not only present
in a developer's checkout; the one exception is what an earlier README command builds
(``examples/web/dist``, built by ``client-ts/scripts/build-example.mjs``). The commands
themselves run in tests/operator/test_operator_readme.py, test_operator_demo.py and the CI's
fresh clone (.ci/run)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
from opcli import REPO

#: a repository path in a command: examples/x.csv, scripts/y.mjs (also relative to client-ts/)
PATH = re.compile(r"(?<![\w$/.-])((?:examples|scripts|client-ts|deploy|conformance|docs|proto"
                  r"|bench|tests|client|collector)/[\w./-]*\w)")
#: built by a README command before it is used: path -> the command's script
BUILT = {"examples/web/dist": "scripts/build-example.mjs"}


def _commands() -> list[str]:
    readme = (REPO / "README.md").read_text()
    lines = [x.split(" #")[0] for b in re.findall(r"```bash\n(.*?)```", readme, re.S)
             for x in b.splitlines() if x.strip() and not x.lstrip().startswith("#")]
    return lines


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(),
                    reason="not a git checkout")
def test_every_path_a_readme_command_uses_is_committed():
    out = subprocess.run(["git", "ls-tree", "-r", "--name-only", "HEAD"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    tracked = set(out.split())
    dirs = {"/".join(p.split("/")[:i]) for p in tracked for i in range(1, p.count("/") + 1)}
    used, missing = [], []
    commands = _commands()
    for n, cmd in enumerate(commands):
        for path in PATH.findall(cmd):
            used.append(path)
            if any(c in tracked or c in dirs for c in (path, f"client-ts/{path}")):
                continue
            builder = BUILT.get(path)
            if builder and any(builder in c for c in commands[:n + 1]):
                continue
            missing.append(path)
    assert len(used) >= 5, used  # the README's commands do use repository files
    assert missing == [], f"README commands use files a fresh clone lacks: {missing}"
