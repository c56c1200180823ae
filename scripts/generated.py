"""Files generated from ``env/profiles.toml`` and committed (``env/serve/<profile>.yaml``,
``deploy/k8s/<profile>/``): write them, or check that the committed ones still match."""
from __future__ import annotations

from pathlib import Path
from typing import Mapping


def sync(files: Mapping[Path, str], check: bool, command: str) -> int:
    """Write ``files`` (path -> text), or with ``check`` only compare them; 1 (and which are stale,
    and ``command`` to regenerate them) when a committed file differs, else 0."""
    stale = []
    for path, text in files.items():
        if check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path))
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            print(f"wrote {path}")
    if stale:
        print(f"out of date with env/profiles.toml: {', '.join(stale)} ({command})")
        return 1
    return 0
