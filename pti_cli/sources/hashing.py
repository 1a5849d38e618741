"""sha256 of checkpoint weight files in background threads (pack records them
in ssq.source_sha256).

Standard library only, so that `pti pack` can start hashing before it imports
numpy and gguf: on this project's 2-vCPU VM the hash is the longest chain of
work in a pack, and the start-up's imports leave the second vCPU idle.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import threading
from pathlib import Path
from typing import Optional

HASH_WINDOW = 64 << 20      # bytes of a file mapped and hashed at a time


class SourceHasher(threading.Thread):
    """sha256 of files in order (Checkpoint.sha256's definition), in a daemon thread
    that stop() ends early.  Hashes the page cache through HASH_WINDOW-sized
    read-only mappings: no copy into a buffer, and one GIL hand-over per window
    (with 1 MiB reads, a header parse running meanwhile in the main thread held
    this thread back 3x: docs/perf.md, ssq/pack)."""

    def __init__(self, files: list[Path]):
        super().__init__(daemon=True)
        self.files = [Path(f) for f in files]
        self.digest: Optional[str] = None
        self.error: Optional[OSError] = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        path = None
        try:
            h = hashlib.sha256()
            for path in self.files:
                with open(path, "rb", buffering=0) as f:
                    size = os.fstat(f.fileno()).st_size
                    for at in range(0, size, HASH_WINDOW):
                        if self._stop_event.is_set():
                            return
                        with mmap.mmap(f.fileno(), min(HASH_WINDOW, size - at), offset=at,
                                       access=mmap.ACCESS_READ) as m:
                            h.update(m)
            self.digest = h.hexdigest()
        except OSError as e:
            self.error = e
        except ValueError as e:          # mmap past the end: the file shrank while hashed
            self.error = OSError(f"{path} changed while being hashed ({e})")

    def stop(self) -> None:
        self._stop_event.set()

    def result(self) -> str:
        """The hex digest, once the thread is done; its OSError if reading failed."""
        self.join()
        if self.error is not None:
            raise self.error
        if self.digest is None:
            raise OSError("hashing was stopped")
        return self.digest


def start_hashes(*paths: Optional[Path]) -> list[Optional[SourceHasher]]:
    """Start hashing each path that is a single file (then its checkpoint's only
    weight file, as pack checks once it is opened); None for a folder, a missing
    path, None, or a file already being hashed for an earlier path."""
    hashers: list[Optional[SourceHasher]] = []
    seen: set[Path] = set()
    for p in paths:
        h = None
        try:
            real = Path(p).resolve() if p is not None else None
            if real is not None and real.is_file() and real not in seen:
                seen.add(real)
                h = SourceHasher([Path(p)])
                h.start()
        except OSError:
            h = None
        hashers.append(h)
    return hashers
