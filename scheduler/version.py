"""cronchain's version, as pip installed it: one place for ``--version`` and /metrics's
``cronchain_build_info``."""

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("cronchain")
except PackageNotFoundError:  # run from a folder that was never installed
    VERSION = "unknown"
