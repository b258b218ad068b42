"""Time and memory bounds for robustness tests: a call that runs past its bound fails fast."""
from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time


class OverTime(BaseException):
    """Raised inside the code under test when its time bound passes (a BaseException, so the
    `except Exception` of the code under test cannot swallow it)."""


@contextlib.contextmanager
def time_limit(seconds: float, what: str = "the call"):
    """Fail with OverTime when the block runs longer than `seconds` (SIGALRM; main thread)."""
    def alarm(signum, frame):
        raise OverTime(f"{what} ran past {seconds:g} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def timed(fn, *args, **kwargs):
    """(fn(*args, **kwargs), seconds)."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def peak_rss_mb(code: str, timeout: float = 120, env: dict | None = None) -> tuple[float, str]:
    """Run `code` in a fresh interpreter; (its peak resident memory in MB, its stdout)."""
    # VmHWM, the peak of this process's own memory: ru_maxrss would also count the parent's
    # pages copied at fork (Linux keeps ru_maxrss across execve), i.e. the size of pytest
    wrapped = code + (
        "\nimport resource as _r, os as _os\n"
        "_kb = _r.getrusage(_r.RUSAGE_SELF).ru_maxrss\n"
        "if _os.path.exists('/proc/self/status'):\n"
        "    _kb = int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1])\n"
        "print('MAXRSS', _kb)\n")
    out = subprocess.run([sys.executable, "-c", wrapped], capture_output=True, text=True,
                         timeout=timeout, env=env)
    assert out.returncode == 0, f"exit code {out.returncode}: {out.stderr[-2000:]}"
    line = [l for l in out.stdout.splitlines() if l.startswith("MAXRSS")][-1]
    return int(line.split()[1]) / 1024, out.stdout
