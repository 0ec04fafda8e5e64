"""The benchmarks' folder of this user's, for what they build or link once and keep."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def private_folder() -> Path:
    """``/tmp/cronchain-bench-UID``, made readable by this user alone; refused if another
    made it first, or opened it: what is kept there is run (a built proxy, a package)."""
    folder = Path(tempfile.gettempdir()) / f"cronchain-bench-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    if folder.stat().st_uid != os.getuid() or folder.stat().st_mode & 0o077:
        raise RuntimeError(f"{folder} is not this user's alone: nothing is kept there")
    return folder
