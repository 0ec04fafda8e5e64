"""``python -m cronchain.scheduler.cli``: the ``cronchain`` command, where no console
script is on the path (a test's subprocess, a container without the entry point)."""

import sys

from cronchain.scheduler.cli.main import main

sys.exit(main())
