"""``python -m uldp.collector.cli``: the ``uldp`` command line."""

import sys

from uldp.collector.cli import main

sys.exit(main())
