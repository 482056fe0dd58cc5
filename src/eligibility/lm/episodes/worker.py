r"""One worker for the user's worlds: TRL's tools and environments, Gymnasium's text ones alike.

The user's code runs in one :class:`eligibility._isolate.Worker` for the run, where it cannot
print into our stdout, exit, hang or outlive the command. Two sides, written once for every
kind of world:

* the worker's, :class:`Served`: the live instances by handle and the released ones pooled by
  kind (TRL's "construct once, reset often"); each call of the user's code through
  :meth:`Served.user`, which awaits what an ``async def`` returns (on one event loop for the
  worker, as TRL runs them) and marks an exception as the user's, so that a ``ValueError`` of
  theirs is told apart from one of ours; a *tool* through :meth:`Served.tool`, on a thread
  that is given ``timeout`` seconds: one that outlasts them is a failed call (TRL answers a
  tool's failure to the model and counts it), its instance set aside, never pooled again;
  a turn's requests of several episodes at once through :meth:`Served.do_many`: each
  episode's in order on a thread of its own, up to ``workers`` episodes at a time, the
  coroutines of all of them on the one event loop;
* the caller's, :class:`Worlds`: every request bounded by ``--tool-timeout`` (a tool's by a
  little more: its thread answers first), a stop (SIGINT, SIGTERM, also one the user's code
  sends) answered within a fifth of a second even while the user's code runs — the worker is
  closed and :class:`~eligibility._signals.Interrupted` raised, so the run checkpoints its
  last completed update and says so — and a failure one line that says what was being done
  (which environment, which method, which row); :meth:`Worlds.ask_all` sends a turn's
  requests as one, and says the first failure in the episodes' order as :meth:`Worlds.ask`
  would have said it.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from eligibility._isolate import UserCodeError, Worker, describe_error
from eligibility._output import note, speaker
from eligibility._signals import Interrupted, stop_on_signals

SLACK_S = 5.0
"""Seconds a tool's request is given beyond ``timeout``: its thread says "timed out" first."""


Request = tuple[Any, ...]
"""A request to the worker: ``(name, *args)``, served by ``do_<name>(*args)``."""

OK, REFUSED, RAISED = "ok", "refused", "raised"
"""How one request of :meth:`Served.do_many` ended: its value; a ``ValueError`` (the contract
broken, said as it is); anything else the user's code raised or did (said by :func:`describe`)."""


class UserRaised(Exception):
    """The user's code raised ``err`` (a ``ValueError`` of theirs is not a refusal of ours)."""

    def __init__(self, err: BaseException) -> None:
        super().__init__(str(err))
        self.err = err


def describe(err: BaseException, request: object) -> str:
    """How the user's code failed: ``raised Type: message (at file.py:12)`` or its exit."""
    err = err.err if isinstance(err, UserRaised) else err
    if isinstance(err, SystemExit):
        return f"called sys.exit({err.code!r}) instead of returning"
    return f"raised {describe_error(err)}"


def what(value: object) -> str:
    """What a user's method returned, in a few words for a refusal: ``a bytes (b'x')``."""
    kind = type(value).__name__
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} ({repr(value)[:40]})"


MAX_WORLD_CHARS = 1_000_000
"""The longest text a world's ``reset`` or ``step`` may return: a million characters is past any
model's context (every token holds at least one), and tokenizing more takes minutes."""


def bounded(method: str, text: str) -> str:
    """``text``, a world's answer, once it is no longer than :data:`MAX_WORLD_CHARS`.

    Raises:
        ValueError: naming ``method`` and the text's length, before a token of it is made.
    """
    if len(text) > MAX_WORLD_CHARS:
        raise ValueError(
            f"{method} returned {len(text):,} characters, more than any model's context holds "
            f"(at most {MAX_WORLD_CHARS:,} are taken): return the text the model should read"
        )
    return text


class Served:
    """The worker's side of every world: live instances by handle, released ones by kind.

    A kind makes its instances with :meth:`make` and answers requests ``(name, *args)`` with
    its ``do_<name>(*args)`` methods.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.pool: dict[Any, list[Any]] = {}
        self.live: dict[int, tuple[Any, Any]] = {}
        self.stuck: set[int] = set()  # handles whose instance a timed-out tool still holds
        self.next = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._starting = threading.Lock()  # one loop, whichever thread asks first

    def make(self, kind: str | None) -> Any:
        """A new instance of ``kind``."""
        raise NotImplementedError

    def serve(self, request: tuple[Any, ...]) -> Any:
        """``do_<name>(*args)`` of a request ``(name, *args)``."""
        name, *args = request
        return getattr(self, "do_" + name)(*args)

    def do_many(self, episodes: list[list[Request]], workers: int) -> list[list[tuple[str, Any]]]:
        """Every episode's requests served, the episodes at once: each one's outcomes, in order.

        An episode's requests are served in their order on one thread (its calls may depend on
        one another), up to ``workers`` episodes at a time; each request keeps its own bound
        (a tool's thread, :meth:`tool`). An episode stops at its first request that does not
        end :data:`OK`: its outcome is the last of the episode's.
        """

        def served(requests: list[Request]) -> list[tuple[str, Any]]:
            out: list[tuple[str, Any]] = []
            for request in requests:
                try:
                    out.append((OK, self.serve(request)))
                except ValueError as err:
                    return [*out, (REFUSED, str(err))]
                except BaseException as err:  # sys.exit, KeyboardInterrupt of the user's code
                    return [*out, (RAISED, describe(err, request))]
            return out

        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(episodes)))) as pool:
            return list(pool.map(served, episodes))

    def checkout(self, kind: str | None) -> tuple[int, Any]:
        """A pooled instance of ``kind`` (or a new one) under a new handle."""
        pool = self.pool.setdefault(kind, [])
        instance = pool.pop() if pool else self.make(kind)
        self.next += 1
        self.live[self.next] = (kind, instance)
        return self.next, instance

    def do_release(self, handle: int) -> None:
        """The instance back to its pool (not one a timed-out tool still holds)."""
        kind, instance = self.live.pop(handle)
        if handle in self.stuck:
            self.stuck.discard(handle)
            return
        self.pool.setdefault(kind, []).append(instance)

    def user(self, fn: Callable[..., Any], *args: object, **kwargs: object) -> Any:
        """``fn(*args, **kwargs)`` of the user's, awaited if it is a coroutine; its error marked."""
        try:
            out = fn(*args, **kwargs)
            if inspect.isawaitable(out):
                out = asyncio.run_coroutine_threadsafe(_awaited(out), self.loop()).result()
        except (Exception, SystemExit) as err:
            raise UserRaised(err) from err
        return out

    def tool(self, handle: int, fn: Callable[..., Any], arguments: dict[str, Any]) -> Any:
        """A tool's answer, on a thread given ``timeout`` s; :class:`TimeoutError` past them.

        The instance of a tool that timed out is set aside (its thread may still be running
        in it); later calls on it fail at once.
        """
        if handle in self.stuck:
            raise RuntimeError("the environment is still busy with a call that timed out")
        try:
            return self.within(self.timeout, self.user, fn, **arguments)
        except TimeoutError:
            self.stuck.add(handle)
            raise
        except UserRaised as err:
            raise err.err from None

    def within(self, seconds: float, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)`` on a thread given ``seconds``; :class:`TimeoutError` past them.

        What it raises is raised here. A thread that never returns is left running: the call
        that timed out is either a failed tool call (its instance set aside) or the end of the
        run, which closes the worker.
        """
        out: dict[str, Any] = {}

        def run() -> None:
            try:
                out["value"] = fn(*args, **kwargs)
            except BaseException as err:  # raised again on the caller's thread
                out["error"] = err

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        thread.join(seconds)
        if thread.is_alive():
            raise TimeoutError(f"the call did not return within {seconds:g} s")
        if "error" in out:
            raise out["error"]
        return out["value"]

    def loop(self) -> asyncio.AbstractEventLoop:
        """The worker's event loop, on a thread of its own (started at the first coroutine)."""
        with self._starting:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(target=self._loop.run_forever, daemon=True).start()
        return self._loop


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


class Worlds:
    """The caller's side: one worker serving a :class:`Served` made by ``served()``.

    Args:
        served: makes the worker's side, in the worker (the user's imports happen there).
        timeout: seconds a request may take (``--tool-timeout``).
    """

    def __init__(self, served: Callable[[], Served], *, timeout: float) -> None:
        state: dict[str, Served] = {}

        def setup() -> Any:
            state["served"] = served()
            return state["served"].setup()  # type: ignore[attr-defined]

        self.timeout = timeout
        self._noted: set[str] = set()
        self._worker = Worker(
            lambda request: state["served"].serve(request), setup=setup, describe=describe
        )

    def ask(
        self,
        request: tuple[object, ...] | None,
        doing: str,
        *,
        slack: float = 0.0,
        bound: str = "--tool-timeout",
    ) -> Any:
        """One request (None: start the worker), or a ValueError of one line saying ``doing``.

        The request is given ``timeout`` + ``slack`` seconds; past them, the message names
        ``bound``, the options that set them.

        Raises:
            ValueError: the user's code failed (an exception, a hang, an exit) or broke the
                contract; the worker is closed.
            Interrupted: a stop came (the worker is closed).
        """
        with stop_on_signals(install=False) as stop:  # the run's flag, if a run is going

            def tick() -> None:
                if stop:
                    self.close()
                    raise Interrupted(stop.signum or 15)

            tick()
            try:
                if request is None:
                    return self._worker.start(timeout=self.timeout, tick=tick)
                return self._worker.call(request, timeout=self.timeout + slack, tick=tick)
            except UserCodeError as err:
                hint = f" ({bound})" if err.kind == "timeout" else ""
                raise self._failed(f"{doing}: the user's code {err.text}{hint}") from None
            except ValueError as err:
                raise self._failed(f"{doing}: {err}") from None

    def ask_all(
        self,
        episodes: Sequence[Sequence[tuple[Request, str]]],
        *,
        workers: int | None,
        slack: float = 0.0,
        bound: str = "--tool-timeout",
    ) -> list[list[Any]]:
        """Each episode's requests ``(request, doing)`` answered, the episodes at once.

        Up to ``workers`` episodes at a time (None: all), each one's requests in order
        (:meth:`Served.do_many`), in one request to the worker; ``workers`` 1 (or a single
        episode with a single request): each request by :meth:`ask`, one after another. A
        request that fails is said as :meth:`ask` says it, the first in the episodes' order;
        the request's own bound, the longest episode's ``timeout`` + ``slack`` a request for
        each round of ``workers`` episodes, is a last resort (a call that ends the worker or
        holds it past every thread's bound).

        Raises:
            ValueError: the first failure in the episodes' order; the worker is closed.
            Interrupted: a stop came (the worker is closed).
        """
        busy = [list(e) for e in episodes if e]
        if workers == 1 or sum(map(len, busy)) <= 1:
            return [[self.ask(r, d, slack=slack, bound=bound) for r, d in e] for e in episodes]
        workers = len(busy) if workers is None else workers
        rounds = -(-len(busy) // workers) * max(map(len, busy))
        doings = list(dict.fromkeys(d for e in busy for _, d in e))
        outcomes = iter(
            self.ask(
                ("many", [[r for r, _ in e] for e in busy], workers),
                "; ".join(doings),
                slack=rounds * (self.timeout + slack) - self.timeout,
                bound=bound,
            )
        )
        out: list[list[Any]] = []
        for e in episodes:
            answers = next(outcomes) if e else []
            for (how, value), (_, doing) in zip(answers, e, strict=False):
                if how == RAISED:
                    raise self._failed(f"{doing}: the user's code {value}")
                if how == REFUSED:
                    raise self._failed(f"{doing}: {value}")
            out.append([value for _, value in answers])
        return out

    def _failed(self, text: str) -> ValueError:
        """The worker closed, and ``text``, one line, as the error to raise."""
        self.close()
        return ValueError(text)

    def note_once(self, text: str) -> None:
        """``text`` on stderr, the first time only (an episode cut, say)."""
        if text not in self._noted:
            self._noted.add(text)
            note(speaker("finetune"), text)

    def close(self) -> None:
        """Stop the worker (and anything it started)."""
        self._worker.close()


__all__ = [
    "MAX_WORLD_CHARS",
    "OK",
    "RAISED",
    "REFUSED",
    "SLACK_S",
    "Request",
    "Served",
    "UserRaised",
    "Worlds",
    "bounded",
    "describe",
    "what",
]
