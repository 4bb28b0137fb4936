"""Issue 17 item 17: every file of the repository the operator documentation (the README
and ``deploy/``) names exists (``deploy/README.md`` cited
``tests/operator/test_deploy.py``, which never did)."""

from __future__ import annotations

import re

import pytest
from opcli import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "deploy").glob("**/*.md"))]
#: a path of the repository in backquotes: `tests/x/y.py`, `bench/z.py::test`, ...
PATH = re.compile(r"`((?:tests|bench|deploy|scripts|collector|client|client-ts|docs|proto"
                  r"|conformance|examples)/[\w./-]*\w)(?:::[\w\[\]-]+)?[`:]")


@pytest.mark.parametrize("doc", DOCS, ids=[str(d.relative_to(REPO)) for d in DOCS])
def test_files_the_docs_name_exist(doc):
    missing = sorted({m for m in PATH.findall(doc.read_text())
                      if "*" not in m and not (REPO / m).exists()})
    assert missing == [], f"{doc.relative_to(REPO)} names missing files: {missing}"
