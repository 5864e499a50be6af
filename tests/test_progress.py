"""The progress bar (bayestrees.progress): tqdm on a terminal, a few plain lines elsewhere, nothing when off."""
import io
import threading

import pytest

from bayestrees.progress import Progress


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_stream_that_is_not_a_terminal_gets_a_few_plain_lines():
    out = io.StringIO()
    p = Progress(1000, "sampling", True, file=out)
    for _ in range(1000):
        p.update(1)
    text = out.getvalue()
    lines = text.splitlines()
    assert "\r" not in text and text.endswith("\n")
    assert 2 <= len(lines) <= 5, lines
    assert all(line.startswith("sampling") for line in lines)
    assert "1000/1000" in lines[-1] and "it/s" in lines[-1]  # count and rate, from tqdm
    p.close()  # already closed at the total: nothing more is written
    assert out.getvalue() == text


def test_stderr_is_the_default_stream(capsys):
    p = Progress(40, "fitting trees")
    for _ in range(40):
        p.update(1)
    err = capsys.readouterr().err  # captured: not a terminal
    assert "\r" not in err and "40/40" in err and len(err.splitlines()) <= 5


def test_a_disabled_bar_writes_nothing(capsys):
    out = io.StringIO()
    p = Progress(1000, "sampling", False, file=out)
    for _ in range(1000):
        p.update(1)
    p.close()
    q = Progress(10, "quiet", enabled=False)
    q.update(10)
    assert out.getvalue() == "" and capsys.readouterr().err == ""
    assert p.done == 1000


def test_a_terminal_gets_tqdm_redraws():
    out = _Terminal()
    p = Progress(50, "tty", True, file=out)
    for _ in range(50):
        p.update(1)
    text = out.getvalue()
    assert text.count("\r") >= 2 and "50/50" in text and text.endswith("\n")


def test_updates_from_several_threads_are_all_counted():
    out = io.StringIO()
    p = Progress(1000, "chains", True, file=out)

    def work():
        for _ in range(250):
            p.update(1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert p.done == 1000 and "1000/1000" in out.getvalue().splitlines()[-1]


def test_close_ends_the_bar_early_and_is_idempotent():
    out = io.StringIO()
    with pytest.raises(RuntimeError):
        with Progress(100, "fit", True, file=out) as p:
            p.update(10)
            raise RuntimeError("a failed fit")
    n = len(out.getvalue())
    assert "10/100" in out.getvalue() and "\r" not in out.getvalue()
    p.close()
    p.update(5)  # after close: counted, not written
    assert len(out.getvalue()) == n and p.done == 15
