"""A minimal text progress bar on stderr (no dependency), shared by every long-running fit."""
from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


class Progress:
    """Text progress bar: ``Progress(total, desc, enabled).update(k)`` after each ``k`` units of work."""

    def __init__(self, total: int, desc: str = "", enabled: bool = True):
        self.total, self.desc, self.enabled = total, desc, enabled
        self.done = 0
        self.t0 = time.perf_counter()

    def update(self, k: int) -> None:
        self.done += k
        if not self.enabled:
            return
        frac = self.done / max(self.total, 1)
        bar = "#" * int(30 * frac)
        el = time.perf_counter() - self.t0
        sys.stderr.write(f"\r{self.desc} [{bar:<30}] {self.done}/{self.total} {el:.1f}s")
        if self.done >= self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()
