"""The progress bar of every long-running fit: ``tqdm.auto``, with sparse plain lines off a terminal.

On a terminal the bar is tqdm's (rate and time left, redrawn in place); in Jupyter it is tqdm's
notebook widget (when ``ipywidgets`` is installed).  When the stream is not a terminal (a log
file, a CI job, a pipe), redrawing with carriage returns would fill the file with hundreds of
partial lines, so the bar prints plain lines instead, at most five: at the start, at a quarter,
half and three quarters of the work, and at the end, each with tqdm's count, rate and time left.
A disabled bar writes nothing and never imports tqdm.
"""
from __future__ import annotations

import math
import sys
import threading

__all__ = ["Progress"]


class _Lines:
    """A file for tqdm that turns each in-place redraw into one plain line (no ``\\r``)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, s: str) -> None:
        text = s.replace("\r", "").replace("\x1b[A", "").strip()
        if text:
            self.stream.write(text + "\n")

    def flush(self) -> None:
        flush = getattr(self.stream, "flush", None)
        if flush is not None:
            flush()


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    """Progress of ``total`` units of work: ``Progress(total, desc, enabled).update(k)`` after each ``k`` units.

    The bar closes itself once ``total`` units are done; :meth:`close` ends it earlier (after an
    error, say) and may be called any number of times.  It is also a context manager.
    ``update`` may be called from several threads.

    Parameters
    ----------
    total : int
        Units of work in all.
    desc : str
        Shown before the bar.
    enabled : bool
        False: nothing is written (and tqdm is not imported).
    file : file-like, optional
        Where to write (default ``sys.stderr``).  A stream that is not a terminal
        (``isatty()`` false) gets at most five plain lines and no carriage returns.
    unit : str
        Name of one unit of work, for the rate (``"it"`` by default, as tqdm).

    Attributes
    ----------
    done : int
        Units reported so far.
    """

    def __init__(self, total: int, desc: str = "", enabled: bool = True, *, file=None, unit: str = "it"):
        self.total, self.desc, self.enabled = int(total), desc, bool(enabled)
        self.done = 0
        self._lock = threading.Lock()
        self._bar = None
        self._marks: list[int] = []  # plain-line mode: the counts at which a line is printed
        if not self.enabled:
            return
        from tqdm.auto import tqdm

        notebook = file is None and any(c.__module__ == "tqdm.notebook" for c in tqdm.__mro__)
        stream = sys.stderr if file is None else file
        if notebook:
            self._bar = tqdm(total=self.total, desc=desc, unit=unit, leave=True)
        elif _isatty(stream):
            self._bar = tqdm(total=self.total, desc=desc, unit=unit, leave=True, file=stream, dynamic_ncols=True)
        else:
            from tqdm.std import tqdm as plain_tqdm

            # no redraw on its own (time-based refresh off); this class asks for the few lines it prints
            self._bar = plain_tqdm(total=self.total, desc=desc, unit=unit, leave=True, file=_Lines(stream),
                                   mininterval=math.inf, maxinterval=math.inf, position=0, ncols=80)
            self._marks = sorted({math.ceil(self.total * q / 4) for q in (1, 2, 3)} - {0, self.total})

    def update(self, k: int) -> None:
        """Report ``k`` more units of work done.

        Parameters
        ----------
        k : int
        """
        with self._lock:
            self.done += k
            bar = self._bar
            if bar is None:
                return
            bar.update(k)
            if self._marks and self.done >= self._marks[0] and self.done < self.total:
                while self._marks and self.done >= self._marks[0]:
                    self._marks.pop(0)
                bar.refresh()
            if self.done >= self.total:
                self._close()

    def close(self) -> None:
        """End the bar (its last state stays on screen); calling it again does nothing."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        bar, self._bar = self._bar, None
        self._marks = []
        if bar is not None:
            bar.close()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
