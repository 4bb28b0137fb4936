"""Maps the import names ``uldp.client`` and ``uldp.collector`` onto ``client/`` and ``collector/``.

Everything else about the distribution lives in ``pyproject.toml``.
"""

import os

from setuptools import setup

ROOTS = {"uldp.client": "client", "uldp.collector": "collector"}


def _packages() -> list[str]:
    found = []
    for name, folder in ROOTS.items():
        for dirpath, dirnames, filenames in os.walk(folder):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "__"))]
            if "__init__.py" in filenames:
                rel = os.path.relpath(dirpath, folder)
                found.append(name if rel == "." else name + "." + rel.replace(os.sep, "."))
    return sorted(found)


setup(
    packages=_packages(),
    package_dir=ROOTS,
    package_data={"uldp.client": ["py.typed", "wire/*.proto"], "uldp.collector": ["py.typed"],
                  "uldp.collector.http.console": ["static/*"]},
)
