r"""Reward functions in TRL's convention, called in a protected worker, once per batch.

A reward function is called as TRL's ``GRPOTrainer`` calls one::

    f(prompts, completions, completion_ids, **columns) -> list[float | None]

with one entry per completion: ``prompts[i]`` its prompt as the data holds it (text, or the
messages of a conversational prompt), ``completions[i]`` its decoded text (for a
conversational prompt ``[{"role": "assistant", "content": text}]``, as TRL passes it),
``completion_ids[i]`` its token ids, and each other column of the data as a list by its name.
``None`` means "not applicable to this completion". Several functions combine as TRL combines
them, a weighted sum over those that apply:

    Rᵢ = Σ_{k : r_ik ≠ None} w_k · r_ik

and a completion that no function scores (every r_ik None) is *unscorable*: TRL leaves it out
of its group's mean and gives it advantage 0; here it is left out of the loss and counts in
its group's baseline at the mean of the group's scorable rewards (see :func:`combine`).

Any real number is a reward: ``int``, ``float``, ``bool``, NumPy scalars, one-element torch
tensors. The functions run in a :class:`eligibility._isolate.Worker` started once for the run
(one round trip a batch), so ``sys.exit``, ``os._exit``, a signal, a print or a call past
``--reward-timeout`` is one line naming the function, never the end of the run's process. An
``async def`` function is awaited, as TRL awaits it. Episodes call the same functions through
:func:`call_all` in the worlds' worker (``lm.episodes.served``), on each finished episode's whole
conversation, with TRL's other keywords (``environments``, ``log_metric``, …).
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from eligibility._isolate import UserCodeError, Worker, load_function
from eligibility.lm.reserved import KEYWORDS
from eligibility.lm.reward_value import as_reward
from eligibility.lm.usermetrics import UserLogs

RewardFunc = Callable[..., Sequence[Any]]


@dataclass(frozen=True)
class TrainerState:
    """The run's progress as TRL's reward functions read it (``trainer_state=``).

    The names are those of ``transformers.TrainerState``, which TRL passes: a reward shaped by
    the training's progress reads ``global_step`` against ``max_steps``, or ``epoch``.

    Attributes:
        global_step: the updates done.
        max_steps: the updates the run may do (``--max-updates``).
        epoch: the passes over the training prompts so far (prompts drawn / prompts).
        num_input_tokens_seen: the completion tokens sampled so far.
        is_world_process_zero: this process is the main one (rank 0).
        is_local_process_zero: this process is the main one of its machine.
    """

    global_step: int = 0
    max_steps: int = 0
    epoch: float = 0.0
    num_input_tokens_seen: int = 0
    is_world_process_zero: bool = True
    is_local_process_zero: bool = True

    @classmethod
    def of(
        cls,
        counters: dict[str, int],
        max_steps: int,
        group_size: int,
        prompts: int,
        ranks: tuple[int, int] = (0, 0),
    ) -> TrainerState:
        """A run's state from its counters (``updates``, ``completions``, ``tokens``).

        Args:
            counters: the run's counters (a checkpoint's, for ``evaluate``).
            max_steps: the run's ``--max-updates``.
            group_size: G, the completions of each prompt drawn.
            prompts: the training prompts (an epoch is a pass over them).
            ranks: (this rank, its rank on its machine).
        """
        return cls(
            global_step=counters.get("updates", 0),
            max_steps=max_steps,
            epoch=counters.get("completions", 0) / group_size / max(prompts, 1),
            num_input_tokens_seen=counters.get("tokens", 0),
            is_world_process_zero=ranks[0] == 0,
            is_local_process_zero=ranks[1] == 0,
        )


class Scored(NamedTuple):
    """A batch's rewards, as the reward functions gave them, and what they logged.

    Attributes:
        rewards: [N] Rᵢ (0 where nothing scored; :func:`combine`).
        scorable: [N] whether any function scored completion i.
        logged: what ``log_metric`` took, ``{name: [values]}`` (``lm.usermetrics.UserLogs``).
        cells: what ``log_extra`` took, ``{column: [one cell per completion]}``.
    """

    rewards: np.ndarray
    scorable: np.ndarray
    logged: dict[str, list[float]]
    cells: dict[str, list[Any]]

    @classmethod
    def plain(cls, rewards: np.ndarray, scorable: np.ndarray | None = None) -> Scored:
        """Rewards that no function logged beside (a built-in task's; ``scorable``: all)."""
        ok = np.ones(len(rewards), dtype=bool) if scorable is None else scorable
        return cls(rewards, ok, {}, {})


HANDED = tuple(k for k in KEYWORDS if k != "environments")
"""TRL's keywords every reward function is handed (``environments`` only with environments)."""


def reward_name(spec: str | RewardFunc) -> str:
    """How a reward function is named in messages: its spec, or a callable's ``__name__``."""
    return spec if isinstance(spec, str) else getattr(spec, "__name__", repr(spec))


def combine(
    r_ik: Sequence[Sequence[float | None]], w_k: Sequence[float]
) -> tuple[np.ndarray, np.ndarray]:
    """Rᵢ = Σ_{k : r_ik ≠ None} w_k · r_ik, and whether any r_ik is not None (TRL's nansum).

    Args:
        r_ik: ``r_ik[k][i]``, function k's reward for completion i (None: not applicable).
        w_k: the weights.

    Returns:
        (R [N] float64, scorable [N] bool); R is 0 where nothing scored.
    """
    r = np.array([[np.nan if x is None else x for x in row] for row in r_ik], dtype=np.float64)
    w = np.asarray(w_k, dtype=np.float64)[:, None]
    scorable = ~np.isnan(r).all(axis=0)
    return np.nansum(w * r, axis=0), scorable


def fill_unscorable(rewards: np.ndarray, scorable: np.ndarray, group_size: int) -> np.ndarray:
    """Each unscorable Rᵢ replaced by the mean of its group's scorable rewards (0 if none).

    With the mean baseline this leaves every group mean as TRL's ``nanmean`` computes it.
    """
    r = rewards.reshape(-1, group_size).copy()
    ok = scorable.reshape(-1, group_size)
    counts = ok.sum(1)
    means = np.where(counts > 0, (r * ok).sum(1) / np.maximum(counts, 1), 0.0)
    r[~ok] = np.broadcast_to(means[:, None], r.shape)[~ok]
    return r.reshape(-1)


def plain_call(fn: Callable[..., Any], **kwargs: object) -> Any:
    """``fn(**kwargs)``, awaited if it returns a coroutine (an ``async def`` reward, as TRL's)."""
    out = fn(**kwargs)
    if inspect.isawaitable(out):
        out = asyncio.run(_awaited(out))
    return out


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def call_all(
    funcs: list[tuple[str, RewardFunc]],
    batch: dict[str, Any],
    call: Callable[..., Any] = plain_call,
) -> list[list[float | None]]:
    """In the worker: every function on the batch, each return checked.

    ``batch``: ``prompts``, ``completions``, ``completion_ids``, ``columns`` (the data's other
    columns, by name) and ``extra`` (TRL's other keywords: ``environments``, ``trainer_state``,
    ``log_metric``, …), each passed by name. ``call(fn, **kwargs)`` makes the call (awaiting).

    Raises:
        Raised: a function raised (its name and error).
        ValueError: a function returned other than one reward per completion.
    """
    n = len(batch["completions"])
    kwargs = {
        "prompts": batch["prompts"],
        "completions": batch["completions"],
        "completion_ids": batch["completion_ids"],
        **batch["columns"],
        **batch.get("extra", {}),
    }
    out = []
    for name, fn in funcs:
        takes_the_call(name, fn, list(kwargs))
        try:
            got = call(fn, **kwargs)
        except BaseException as err:
            raise Raised(name, getattr(err, "err", err)) from None
        if isinstance(got, str | bytes | Mapping) or not hasattr(got, "__len__"):
            raise ValueError(
                f"reward function {name} returned a {type(got).__name__}, not a list of {n} "
                "rewards (one per completion; None where it does not apply)"
            )
        if len(got) != n:
            raise ValueError(
                f"reward function {name} returned {len(got)} rewards for {n} completions: "
                "return one per completion (None where it does not apply)"
            )
        row = []
        for i, value in enumerate(got):
            try:
                row.append(as_reward(value))
            except ValueError as err:
                raise ValueError(
                    f"reward function {name} returned {err} for completion {i}: return a real "
                    "number or None"
                ) from None
            except Exception as err:  # a number type whose own conversion raises
                raise ValueError(
                    f"reward function {name} returned a {type(value).__name__} for completion "
                    f"{i} that could not be converted to a float ({type(err).__name__}: "
                    f"{str(err)[:80]}): return a real number or None"
                ) from None
        out.append(row)
    return out


def _serve(funcs: list[tuple[str, RewardFunc]], request: dict[str, Any]) -> Any:
    """In the worker: a batch scored (:func:`call_all`), or the signatures checked.

    A batch is scored with TRL's keywords (:data:`HANDED`): the run's ``trainer_state`` and
    loggers made here, in the worker, that check what they are given at the call; the reply
    is (r_ik, what ``log_metric`` took, what ``log_extra`` took).
    ``{"signatures": names}``: every function's signature bound to a call of those names
    (:func:`takes_the_call`), none called.
    """
    if "signatures" in request:
        for name, fn in funcs:
            takes_the_call(name, fn, request["signatures"])
        return None
    logs = UserLogs(len(request["completions"]))
    extra = {
        "trainer_state": request.pop("state") or TrainerState(),
        "log_metric": logs.log_metric,
        "log_extra": logs.log_extra,
    }
    return call_all(funcs, {**request, "extra": extra}), logs.logged, logs.cells


def takes_the_call(name: str, fn: Callable[..., Any], given: Sequence[str]) -> None:
    """Refuse a function whose signature cannot take TRL's call, before calling it.

    The call is ``fn(**kwargs)`` with ``given`` its names (``prompts``, ``completions``,
    ``completion_ids``, the data's columns, TRL's other keywords); the signature is bound to
    them (``inspect.Signature.bind``), so a missing ``**kwargs`` or a required argument the
    call never gives is one line naming both, not an error from inside the function.

    Raises:
        ValueError: what the signature lacks, naming the function.
    """
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without one: the call itself will say
        return
    try:
        signature.bind(**dict.fromkeys(given))
    except TypeError as err:
        fix = "; add **kwargs" if "unexpected keyword" in str(err) else ""
        raise ValueError(
            f"reward function {name}{signature} cannot take TRL's call "
            f"f({', '.join(f'{g}=' for g in given)}): {err}{fix}"
        ) from None


class Raised(Exception):
    """Reward function ``name`` raised ``err``."""

    def __init__(self, name: str, err: BaseException) -> None:
        super().__init__(name)
        self.name, self.err = name, err


def _describe(err: BaseException, request: object) -> str:
    if isinstance(err, Raised):
        name, err = err.name, err.err
        if isinstance(err, SystemExit):
            return (
                f"reward function {name} called sys.exit({err.code!r}) instead of returning: "
                "return a list of rewards; never exit"
            )
        import traceback

        last = traceback.format_exception_only(type(err), err)[-1].strip()
        return f"reward function {name} raised {last}"
    if isinstance(err, SystemExit):
        return f"a reward module called sys.exit({err.code!r}) at import; never exit"
    return f"the reward functions could not be loaded: {err}"


class Rewards:
    """The run's reward functions, served by one worker process for the whole run.

    Args:
        funcs: ``FILE.py:fn`` / ``module:fn`` specs or callables (forked into the worker).
        weights: w_k, one per function (None: all 1).
        timeout: seconds one batch may take (``--reward-timeout``).
        what: how a failure to load them names them (``--eval-metric``'s: its own words).
    """

    def __init__(
        self,
        funcs: Sequence[str | RewardFunc],
        weights: Sequence[float] | None = None,
        *,
        timeout: float = 60.0,
        what: str = "the reward functions",
    ) -> None:
        if not funcs:
            raise ValueError("give at least one reward function")
        if weights is not None and len(weights) != len(funcs):
            raise ValueError(
                f"--reward-weights has {len(weights)} weights for {len(funcs)} reward functions: "
                "give one weight per function"
            )
        self.specs = list(funcs)
        self.names = [reward_name(f) for f in funcs]
        self.weights = [1.0] * len(funcs) if weights is None else [float(w) for w in weights]
        self.timeout, self.what = timeout, what
        self._funcs: list[tuple[str, RewardFunc]] = []
        self._worker = Worker(
            lambda request: _serve(self._funcs, request), setup=self._load, describe=_describe
        )

    def _load(self) -> None:
        """In the worker: import every function named by a spec."""
        for name, spec in zip(self.names, self.specs, strict=True):
            fn = (
                load_function(spec, example="rewards.py:correct") if isinstance(spec, str) else spec
            )
            if not callable(fn):
                raise ValueError(f"reward function {name} is not callable")
            self._funcs.append((name, fn))

    def start(self) -> Rewards:
        """Start the worker and import the functions there.

        Raises:
            ValueError: a spec that does not load (a SyntaxError, an exception at import, no
                such function), one line naming it; or a module that ends the worker.
        """
        try:
            self._worker.start(timeout=self.timeout)
        except UserCodeError as err:
            self.close()
            raise ValueError(self._words(err, "importing")) from None
        except ValueError as err:
            self.close()
            raise ValueError(f"loading {self.what}: {err}") from None
        return self

    def check(self, given: Sequence[str]) -> None:
        """Every function's signature bound to a call of ``given`` names, none called.

        In the worker (:func:`takes_the_call`): one that cannot take the call is refused at
        start, before the run's directory is made.

        Raises:
            ValueError: what a signature lacks, naming the function.
        """
        try:
            self._worker.call({"signatures": list(given)}, timeout=self.timeout)
        except UserCodeError as err:
            self.close()
            raise ValueError(self._words(err, "reading its signature")) from None

    def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        completion_ids: list[list[int]],
        columns: dict[str, list[Any]],
        state: TrainerState | None = None,
    ) -> Scored:
        """One batch's rewards (see :func:`combine`) and what the functions logged.

        Each function is handed TRL's keywords (:data:`HANDED`): ``state`` as its
        ``trainer_state`` (None: a blank one), and ``log_metric`` and ``log_extra``.

        Raises:
            ValueError: a function raised, exited, was killed, overran the timeout or returned
                something that is not one reward per completion: one line naming it.
        """
        batch = {
            "prompts": prompts,
            "completions": completions,
            "completion_ids": completion_ids,
            "columns": columns,
            "state": state,
        }
        try:
            r_ik, logged, cells = self._worker.call(batch, timeout=self.timeout)
        except UserCodeError as err:
            self.close()
            raise ValueError(self._words(err, "scoring a batch")) from None
        with np.errstate(over="ignore"):  # an overflow is said below, by the functions' values
            r, scorable = combine(r_ik, self.weights)
        if not np.isfinite(r).all():
            i = int(np.flatnonzero(~np.isfinite(r))[0])
            terms = ", ".join(
                f"{n} {r_k[i]!r} × weight {w:g}"
                for n, r_k, w in zip(self.names, r_ik, self.weights, strict=True)
            )
            raise ValueError(
                f"the weighted sum of the rewards of completion {i} overflowed to {r[i]} "
                f"(Σ weight × reward of {terms}): return rewards (and give --reward-weights) "
                "whose sum stays finite"
            )
        return Scored(r, scorable, logged, cells)

    def _words(self, err: UserCodeError, doing: str) -> str:
        who = "reward function " + ", ".join(self.names)
        if err.kind == "timeout":
            return (
                f"{who} {err.text} (--reward-timeout) {doing}: it sleeps, waits or loops; a "
                "batch should take well under a second (raise --reward-timeout if it honestly "
                "needs longer)"
            )
        if err.kind == "ended":
            return f"{who} {err.text} {doing}: return a list of rewards; never exit"
        return err.text

    def close(self) -> None:
        """Stop the worker (and anything it started)."""
        self._worker.close()

    def __enter__(self) -> Rewards:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def started(
    funcs: Sequence[str | RewardFunc],
    weights: Sequence[float] | None,
    metric: str | RewardFunc | None,
    *,
    timeout: float,
) -> tuple[Rewards, Rewards | None]:
    """The run's reward functions and its accuracy's (``--eval-metric``; None: none), started.

    Raises:
        ValueError: as :meth:`Rewards.start`; the worker started first is closed.
    """
    rewards = Rewards(funcs, weights, timeout=timeout).start()
    try:
        if metric is None:
            return rewards, None
        return rewards, Rewards([metric], timeout=timeout, what="the eval metric").start()
    except BaseException:
        rewards.close()
        raise


__all__ = [
    "HANDED",
    "Raised",
    "Rewards",
    "Scored",
    "TrainerState",
    "as_reward",
    "call_all",
    "combine",
    "fill_unscorable",
    "plain_call",
    "reward_name",
    "started",
]
