"""A call made in a forked child whose files the kernel caps: a real refused write.

Past ``RLIMIT_FSIZE`` bytes a write fails with EFBIG ("File too large", errno 27), as a full
disk's fails with ENOSPC: the libraries' own error paths run (safetensors', tokenizers',
TensorBoard's writer thread), no root and no small file system needed.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

HANG_S = 120
"""A child still running after this long is ended by SIGALRM (a fork that deadlocked)."""


def refuse_writes_past(cap: int) -> None:
    """From now on this process's files may not grow past ``cap`` bytes: a write past it fails
    with EFBIG (the signal the kernel would send first, SIGXFSZ, is ignored)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))


def capped(cap: int, call: Callable[[], int], log: Path) -> int:
    """``call()`` in a forked child whose files may not grow past ``cap`` bytes, its stderr
    in ``log``: the child's exit status (``call``'s return, 99 for an exception it let out)."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 99
        try:
            signal.alarm(HANG_S)
            if "torch" in sys.modules:  # OpenMP's pool does not survive the fork (_isolate)
                sys.modules["torch"].set_num_threads(1)
            refuse_writes_past(cap)
            sys.stderr = open(log, "w", buffering=1)  # the child's, to its end
            code = call()
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stderr.flush()
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
