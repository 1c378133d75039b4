"""Writing a file so that an interrupt leaves the old content or the new one, never a mix."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from patchseries.interrupts import stage


def write_file(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` (written as it is) in one rename; a failed write leaves ``path`` as it was."""
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f"{path.name}.", suffix=".partial")
    os.close(fd)
    staged = Path(name)
    try:
        staged.write_bytes(text.encode())
        staged.chmod(0o644)
        stage(f"write-{path.name}")
        os.replace(staged, path)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
