"""A worker process for the user's code, where it cannot take our command down or lie.

``check`` runs a user's loss here, ``finetune`` its reward functions, model factories and data
loading. The worker is forked (so closures and lambdas work as well as ``FILE.py:fn``), runs a
``setup`` once, then serves requests one at a time until it is closed. The caller waits at most
``timeout`` seconds for each reply and reads how the worker ended, so that

* a call that sleeps or loops is stopped after ``timeout`` s (the worker is killed);
* ``sys.exit``, ``os._exit``, a signal (the kernel's out-of-memory killer sends SIGKILL) or a
  crash in native code are a :class:`UserCodeError` that names what happened;
* the worker's address space may be capped (``memory`` MiB above what it inherited), so a
  runaway allocation is a ``MemoryError`` in the worker, not a machine brought down;
* whatever the user's code prints goes to stderr (our stdout holds the result);
* the worker runs in a session (and process group) of its own, and closing it kills the whole
  group: a child the user's code forked cannot outlive the command or hold its stdout or
  stderr open. SIGINT is the caller's to handle, and Linux's parent-death signal ends a worker
  orphaned by ``kill -9``.

Where ``os.fork`` does not exist (Windows) the calls run in the caller's own process.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Callable
from typing import Any

_OK, _BAD, _ERROR = "ok", "bad", "error"
_THREADED_FORK = r".*use of fork\(\) may lead to deadlocks"
_CUDA_FORK = "re-initialize CUDA in forked subprocess"
_CUDA_HINT = (
    " (this process had started CUDA before it forked the worker your code runs in, and a "
    "forked process cannot start CUDA again: start CUDA in your code only, e.g. run it "
    "from the command line, where nothing starts CUDA before the worker)"
)
_AUTOGRAD_FORK = "autograd's threading in combination with fork-based multiprocessing"
_AUTOGRAD_HINT = (
    " (this process had run a backward pass on a machine with a GPU before it forked the worker "
    "your code runs in, and a forked process cannot run one after that: call this from a "
    "fresh process, e.g. the command line, where no backward pass comes before the worker)"
)


class UserCodeError(Exception):
    """The user's code raised, ended its process, was killed or overran: ``text`` says which.

    ``kind``: ``raised`` (an exception, ``sys.exit`` included), ``ended`` (the worker exited
    or was killed by a signal) or ``timeout``.
    """

    def __init__(self, text: str, kind: str = "raised") -> None:
        super().__init__(text)
        self.text, self.kind = text, kind


def _last_line(err: BaseException) -> str:
    return traceback.format_exception_only(type(err), err)[-1].strip()


def describe_default(err: BaseException, request: Any) -> str:
    """``raised KeyError: 'x'`` (the default description of a user's exception)."""
    if isinstance(err, SystemExit):
        return f"called sys.exit({err.code!r}) instead of returning"
    return f"raised {_last_line(err)}"


def describe_error(err: BaseException) -> str:
    """``Type: message`` (its first line) and where in the user's code it was raised.

    The place (``(at myenv.py:42)``) is the innermost frame of the user's own code, looking
    outward past library frames (NumPy, Gymnasium, the standard library) and stopping at this
    package's: an error that ``eligibility`` raises, or that a library raises for it, names its
    cause in its message instead.
    """
    if isinstance(err, SystemExit):
        text = f"the run called sys.exit({err.code!r})"
    else:
        text = f"{type(err).__name__}: {err}".splitlines()[0]
    ours = os.path.dirname(os.path.abspath(__file__)) + os.sep  # src/eligibility/
    libraries = tuple({os.path.abspath(p) + os.sep for p in (sys.prefix, sys.base_prefix)})
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        path = os.path.abspath(frame.filename)
        if path.startswith(ours):
            break
        if frame.filename.startswith("<") or path.startswith(libraries):
            continue
        return f"{text} (at {os.path.basename(frame.filename)}:{frame.lineno})"
    return text


def how_it_ended(code: int | None) -> str:
    """What a worker's exit status says: killed by a signal (and the likely why), or exited."""
    if code is not None and code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)
        why = {
            "SIGKILL": "the system's out-of-memory killer sends SIGKILL: does it allocate "
            "without bound?",
            "SIGSEGV": "a crash in native code (an extension, or torch called out of bounds)",
        }.get(name, "")
        return f"was killed by {name}" + (f" ({why})" if why else "")
    return f"ended the process (exit status {code}) instead of returning (os._exit?)"


def import_user_module(name: str) -> Any:
    """Import the user's module ``name`` as ``python -m`` would: the current directory imports.

    Every ``module:name`` the command line takes (``train``'s env ids, ``--module``,
    ``finetune``'s rewards and models) is imported through here, so a file beside the user
    imports alike everywhere.
    """
    import importlib

    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    return importlib.import_module(name)


def load_module(where: str) -> Any:
    """``path/to/file.py`` or ``package.module`` → the module, as :func:`load_function` imports it.

    Raises:
        ValueError: a missing file, or a module that fails to import (its error in one line,
            ``sys.exit`` at import included).
    """
    import importlib.util
    from pathlib import Path

    try:
        if where.endswith(".py") or "/" in where or Path(where).exists():
            path = Path(where)
            if not path.is_file():
                raise ValueError(f"{where}: no such file")
            mod_name = f"_eligibility_user_{abs(hash(str(path.resolve())))}"
            module_spec = importlib.util.spec_from_file_location(mod_name, path)
            if module_spec is None or module_spec.loader is None:
                raise ValueError(f"{where}: not a Python file")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[mod_name] = module
            folder = str(path.resolve().parent)  # as for a script: its siblings import
            if folder not in sys.path:
                sys.path.insert(0, folder)
            module_spec.loader.exec_module(module)
            return module
        return import_user_module(where)
    except ValueError:
        raise
    except BaseException as err:
        if isinstance(err, KeyboardInterrupt):
            raise
        raise ValueError(f"{where} does not import: {_last_line(err)}") from None


def load_function(spec: str, *, example: str = "my_module.py:fn") -> Callable[..., Any]:
    """``path/to/file.py:name`` or ``package.module:name`` → the function.

    A file is loaded as a script is (its folder importable); a module is imported with the
    current directory importable, so ``mytask:reward`` beside ``mytask.py`` works. Run it in a
    :class:`Worker` when the import itself must not hurt the caller (``os._exit`` at import).

    Raises:
        ValueError: no ``:name``, a missing file, a module that fails to import (its error in
            one line, ``sys.exit`` at import included), or no such function.
    """
    where, _, name = spec.rpartition(":")
    if not where or not name:
        raise ValueError(f"give FILE.py:FUNCTION or module:FUNCTION (e.g. {example}), got {spec!r}")
    module = load_module(where)
    fn = getattr(module, name, None)
    if fn is None:
        found = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
        hint = f"; it defines {', '.join(sorted(found)[:8])}" if found else ""
        raise ValueError(f"{where} has no function {name!r}{hint}")
    if not callable(fn):
        raise ValueError(f"{where}:{name} is not a function")
    return fn


class Worker:
    """A forked worker that runs ``setup()`` once, then ``serve(request)`` per :meth:`call`.

    Args:
        serve: ``serve(request) -> reply`` in the worker; the reply must pickle. A
            ``ValueError`` it raises comes back as a ``ValueError`` (a reply outside the
            contract); any other exception as a :class:`UserCodeError`.
        setup: run once in the worker before the first request; its return value is what
            :meth:`start` returns.
        describe: ``describe(err, request)`` → the text of the error for an exception the
            user's code raised (``request`` is None during ``setup``).
        memory: MiB the worker may allocate beyond what it inherits (None: no cap).
        start_method: ``fork`` (the default: closures work), or ``spawn`` / ``forkserver``
            (a fresh interpreter: ``serve``, ``setup`` and ``describe`` must pickle), where the
            worker must start CUDA whatever this process did with it.
        cap: what ``memory`` caps: ``address-space`` (RLIMIT_AS, the default) or ``data``
            (RLIMIT_DATA: the private writable memory; CUDA's initialisation reserves far more
            address space than any cap leaves, and fails under RLIMIT_AS as out of memory).
    """

    def __init__(
        self,
        serve: Callable[[Any], Any],
        *,
        setup: Callable[[], Any] = lambda: None,
        describe: Callable[[BaseException, Any], str] = describe_default,
        memory: int | None = None,
        start_method: str = "fork",
        cap: str = "address-space",
    ) -> None:
        self._serve, self._setup, self._describe, self._memory = serve, setup, describe, memory
        self._start_method, self._cap = start_method, cap
        self._process: Any = None
        self._conn: Any = None

    def __getstate__(self) -> dict[str, Any]:
        """What a spawned worker receives: the work, not this side's process and pipe."""
        return {**self.__dict__, "_process": None, "_conn": None}

    @property
    def isolated(self) -> bool:
        """Whether the calls run in another process (not on a platform without ``fork``)."""
        return hasattr(os, "fork")

    def start(self, *, timeout: float, tick: Callable[[], None] = lambda: None) -> Any:
        """Fork the worker and wait for ``setup()``; its return value.

        Raises:
            UserCodeError: setup raised, ended the worker or outlasted ``timeout`` seconds.
            ValueError: setup raised a ValueError.
        """
        if not self.isolated:  # Windows (no fork), and the tests that call user code here
            return self._setup()
        self.fork()
        return self.ready(timeout=timeout, tick=tick)

    def fork(self) -> None:
        """Fork the worker, whose ``setup()`` starts at once; :meth:`ready` waits for it.

        Fork before this process runs autograd where torch sees an accelerator: a backward pass
        then starts the engine's device threads, and a process forked after that cannot run
        one (torch: "Unable to handle autograd's threading in combination with fork-based
        multiprocessing").
        """
        import multiprocessing as mp

        ctx = mp.get_context(self._start_method)
        here, there = ctx.Pipe(duplex=True)
        self._process = ctx.Process(target=self._main, args=(there,), daemon=True)
        with warnings.catch_warnings():
            # Python 3.12+ warns at every fork of a process with threads (torch's pool): the
            # worker runs the user's Python code only, and torch resets its pool in a child
            warnings.filterwarnings("ignore", _THREADED_FORK, DeprecationWarning)
            self._process.start()
        there.close()
        self._conn = here
        _LIVE.add(self)

    def ready(self, *, timeout: float, tick: Callable[[], None] = lambda: None) -> Any:
        """Wait for a forked worker's ``setup()``; its return value (as :meth:`start`)."""
        if not self.isolated:  # Windows (no fork), and the tests that call user code here
            return self._setup()
        return self._receive(timeout, tick, None)

    def call(self, request: Any, *, timeout: float, tick: Callable[[], None] = lambda: None) -> Any:
        """``serve(request)`` in the worker, waited for at most ``timeout`` seconds.

        ``tick()`` is called about five times a second while waiting (a progress line, say).

        Raises:
            UserCodeError: the user's code raised, ended the worker, was killed, or overran
                (the worker is then closed).
            ValueError: ``serve`` raised a ValueError.
        """
        if not self.isolated:  # Windows (no fork), and the tests that call user code here
            return self._serve(request)
        if self._conn is None:
            raise RuntimeError("the worker is not running: start() it first")
        try:
            self._conn.send(request)
        except (BrokenPipeError, OSError):
            self._conn.poll(0)  # the worker died before the request: say how below
        return self._receive(timeout, tick, request)

    def _receive(self, timeout: float, tick: Callable[[], None], request: Any) -> Any:
        asked = time.perf_counter()
        try:
            while not self._conn.poll(0.2):
                tick()
                if time.perf_counter() - asked > timeout:
                    self.close()
                    raise UserCodeError(f"did not return within {timeout:g} s", "timeout")
            tag, body = self._conn.recv()
        except (EOFError, OSError):
            self._process.join(10)
            code = self._process.exitcode
            self.close()
            raise UserCodeError(how_it_ended(code), "ended") from None
        if tag == _BAD:
            raise ValueError(body)
        if tag == _ERROR:
            raise UserCodeError(body)
        return body

    def close(self) -> None:
        """Kill the worker and every process it started (its process group); idempotent."""
        _LIVE.discard(self)
        process, self._process = self._process, None
        if process is None:
            return
        if process.pid is not None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if process.is_alive():
            process.kill()
        process.join()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- in the worker ---------------------------------------------------------------------
    def _main(self, conn: Any) -> None:
        os.setsid()  # a session of our own: close() kills whatever the user's code forks
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the caller's to handle
        _die_with_parent()
        sys.stdout.flush()
        os.dup2(2, 1)  # what the user's code prints must not reach the result on stdout
        # an error Python cannot raise (a __del__'s, a finaliser's) is not the user's answer:
        # its "Exception ignored ... Traceback" would come before our one line
        sys.unraisablehook = lambda unraisable: None
        if self._memory is not None:
            _cap_memory(self._memory, self._cap)
        _one_thread_if_forked(self._start_method)
        if not self._reply(conn, lambda _: self._setup(), None):
            return
        while True:
            try:
                request = conn.recv()
            except (EOFError, OSError):
                return
            if not self._reply(conn, self._serve, request):
                return

    def _reply(self, conn: Any, fn: Callable[[Any], Any], request: Any) -> bool:
        try:
            out: tuple[str, Any] = (_OK, fn(request))
        except ValueError as err:
            out = (_BAD, str(err))
        except BaseException as err:  # SystemExit, KeyboardInterrupt raised by the user's code
            text = self._describe(err, request)
            text += _CUDA_HINT if _CUDA_FORK in text else ""
            out = (_ERROR, text + (_AUTOGRAD_HINT if _AUTOGRAD_FORK in text else ""))
        try:
            conn.send(out)
        except Exception as err:  # a reply that does not pickle
            conn.send((_BAD, f"returned something that cannot be sent back ({_last_line(err)})"))
        except BaseException:
            return False
        return True


def _one_thread_if_forked(start_method: str) -> None:
    """In a forked worker, torch (where this process had loaded it) runs one thread.

    torch's CPU kernels run on OpenMP (libgomp), whose thread pool does not survive a fork: in a
    child of a process that has run a parallel kernel, the next one (a matmul of 512 × 512, a
    reward model's forward) waits forever on threads the child does not have, and the user's
    code would only end at its timeout. One thread runs every kernel in the calling thread.
    A spawned worker starts a fresh torch of its own and keeps its threads.
    """
    if start_method == "fork" and "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)


_LIVE: set[Worker] = set()


@atexit.register
def _close_all() -> None:
    """No worker (nor anything it forked) outlives the command."""
    for worker in list(_LIVE):
        worker.close()


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies (no orphan after ``kill -9``)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - no libc to speak to
        pass


def _cap_memory(mib: int, cap: str = "address-space") -> None:
    """RLIMIT_AS (or RLIMIT_DATA) at what the process maps now plus ``mib`` MiB (Linux only).

    ``data``: the data segment, /proc/self/statm's sixth field, and RLIMIT_DATA.
    """
    try:
        import resource

        with open("/proc/self/statm") as f:
            fields = f.read().split()
        pages = int(fields[5] if cap == "data" else fields[0])
        which = resource.RLIMIT_DATA if cap == "data" else resource.RLIMIT_AS
        limit = pages * os.sysconf("SC_PAGE_SIZE") + mib * 2**20
        _soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(which, (limit, hard))
    except (ImportError, OSError, ValueError):  # pragma: no cover - not Linux
        pass


__all__ = [
    "UserCodeError",
    "Worker",
    "describe_default",
    "how_it_ended",
    "load_function",
    "load_module",
]
