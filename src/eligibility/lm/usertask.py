"""The user's task: their data, their tokenizer and their reward functions, turned into a Task.

The edge between the user's world and ours. The data is read (in a protected worker: a file
that crashes the reader cannot take the run down) into records; the prompts are encoded once
with the user's tokenizer (``lm.edge.hf``) or, on the tiny model without one, one token per
character; the reward functions (TRL's convention, ``lm.rewards``) run in one worker process
for the whole run. The inner code sees token ids and reward arrays only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict, Unpack

import numpy as np

from eligibility.lm.config import FinetuneConfig
from eligibility.lm.edge import hf
from eligibility.lm.edge.data import check_records, fingerprint, read_files
from eligibility.lm.episodes.gym import probe, text_task
from eligibility.lm.episodes.served import Factories, Tool, TrlTools
from eligibility.lm.episodes.tools import ToolSettings, with_tools
from eligibility.lm.reserved import CALL, refuse_columns
from eligibility.lm.rewards import HANDED, RewardFunc, Rewards, Scored, TrainerState, started
from eligibility.lm.specs import refuse_unnamed
from eligibility.lm.tasks import BOS, BUILTIN, EOS, SPECIALS, Task
from eligibility.lm.tasks import make_task as builtin_task
from eligibility.lm.tokenizer import Tokenizer

Records = list[dict[str, Any]]


@dataclasses.dataclass(frozen=True)
class Codec:
    """Prompts → ids and ids → text, with the ids that matter.

    Attributes:
        encode: one prompt (text or messages) → ids.
        decode: a completion's ids (EOS cut) → its text.
        eos_id: the id that ends a completion.
        vocab: the token strings of a character vocabulary (empty for a tokenizer's).
        n_tokens: V, the tokens a model must have logits for.
        tokenizer: the Hugging Face tokenizer (None: characters).
        show: one prompt → the text a reader is shown of it (``lm.edge.hf.shown``).
    """

    encode: Callable[[Any], list[int]]
    decode: Callable[[Sequence[int]], str]
    eos_id: int
    vocab: tuple[str, ...]
    n_tokens: int
    tokenizer: Tokenizer | None = None
    show: Callable[[Any], str] = str


def tokenizer_dir(config: FinetuneConfig) -> tuple[str, str] | None:
    """(path, option) the tokenizer comes from: ``--tokenizer``, a ``--model`` directory or GGUF."""
    if config.tokenizer is not None:
        return config.tokenizer, "--tokenizer"
    if config.model != "tiny" and (Path(config.model).is_dir() or hf.is_gguf(config.model)):
        return config.model, "--model"
    return None


def codec_for(config: FinetuneConfig, records: Records) -> Codec:
    """The user's tokenizer (see :func:`tokenizer_dir`), or one token per character."""
    where = tokenizer_dir(config)
    if where is not None:
        tok = hf.load_tokenizer(*where)
        eos, _bos, _pad = hf.special_ids(tok)
        return Codec(
            lambda p: hf.encode_prompt(tok, p),
            lambda ids: hf.decode(tok, ids),
            eos,
            (),
            len(tok),
            tok,
            hf.shown,
        )
    if any(not isinstance(r["prompt"], str) for r in records):
        if config.model != "tiny" and ":" not in config.model:  # a directory that is not there
            raise ValueError(
                f"--model {config.model}: no such directory; give a directory holding a Hugging "
                "Face causal LM and its tokenizer, module:factory, or tiny"
            )
        raise ValueError(
            "conversational prompts need a tokenizer with a chat template: give --model DIR (a "
            "Hugging Face model with its tokenizer) or --tokenizer DIR"
        )
    chars = sorted(set("".join(r["prompt"] for r in records)) | set(config.completion_chars))
    vocab = (*SPECIALS, *chars)
    ix = {s: i for i, s in enumerate(vocab)}
    return Codec(
        lambda p: [BOS, *(ix[ch] for ch in p)],
        lambda ids: "".join(vocab[i] for i in ids if i >= len(SPECIALS)),
        EOS,
        vocab,
        len(vocab),
    )


def fingerprints(config: FinetuneConfig) -> dict[str, str]:
    """SHA-256 of each data file the run reads, by path (the run's identity).

    Raises:
        ValueError: a data file that is not there, naming its option.
    """
    given = (("--prompts", config.prompts), ("--eval-prompts", config.eval_prompts))
    for option, path in given:
        if path is not None and not Path(path).exists():
            raise ValueError(f"{option} {path}: no such file or directory")
    return {p: fingerprint(p, option) for option, p in given if p is not None}


def _columns(records: Records) -> list[str]:
    """The records' columns that a reward function is given by name (all but ``prompt``)."""
    return sorted({k for r in records for k in r} - {"prompt"})


def _batch_rewards(records: Records, codec: Codec, rewards: Rewards) -> Callable[..., Any]:
    """``batch(prompt_index, completions, ended, state)`` → rewards(prompts, completions, …)."""
    columns = _columns(records)

    def batch(
        prompt_index: Sequence[int],
        completions: list[list[int]],
        ended: Sequence[bool],
        state: TrainerState | None = None,
    ) -> Scored:
        prompts = [records[int(p)]["prompt"] for p in prompt_index]
        texts = [codec.decode(c) for c in completions]
        shown = [
            [{"role": "assistant", "content": t}] if hf.is_conversational(p) else t
            for p, t in zip(prompts, texts, strict=True)
        ]
        ids = [
            [*c, codec.eos_id] if e else list(c) for c, e in zip(completions, ended, strict=True)
        ]
        cols = {k: [records[int(p)].get(k) for p in prompt_index] for k in columns}
        return rewards(prompts, shown, ids, cols, state)

    return batch


def _encoded(name: str, records: Records, codec: Codec, t_max: int) -> Task:
    """The records' prompts encoded once (``score`` 0: the caller gives the reward)."""
    return Task(
        name,
        codec.vocab,
        tuple(tuple(codec.encode(r["prompt"])) for r in records),
        lambda i, c, e: 0.0,
        max_completion_length=t_max,
        eos_id=codec.eos_id,
        n_tokens=None if codec.vocab else codec.n_tokens,
        decode=codec.decode,
        tokenizer=codec.tokenizer,
        shown=tuple(codec.show(r["prompt"]) for r in records),
    )


def _split(
    name: str,
    records: Records,
    codec: Codec,
    rewards: Rewards,
    metric: Rewards | None,
    t_max: int,
    close: Callable[[], None],
) -> Task:
    """One split's task of single completions, scored by ``rewards`` (``metric``: accuracy)."""
    score_batch = _batch_rewards(records, codec, rewards)
    metric_batch = None
    if metric is not None:
        values = _batch_rewards(records, codec, metric)

        def metric_batch(
            prompt_index: Sequence[int], completions: list[list[int]], ended: Sequence[bool]
        ) -> np.ndarray:
            scored = values(prompt_index, completions, ended)
            return np.where(scored.scorable, scored.rewards, np.nan)

    def score(i: int, c: Sequence[int], ended: bool) -> float:
        return float(score_batch([i], [list(c)], [ended]).rewards[0])

    return dataclasses.replace(
        _encoded(name, records, codec, t_max),
        score=score,
        batch_rewards=score_batch,
        metric=metric_batch,
        close=close,
    )


@dataclasses.dataclass(frozen=True)
class Given:
    """What a run was handed from Python beside its config (None: the config's own).

    Attributes:
        reward_funcs: callables that replace ``config.task``'s specs.
        records: the training and held-out records (in-memory datasets).
        trl_tools: TRL's ``tools=`` and ``environment_factory=`` (Nones: --tools, --env).
    """

    reward_funcs: Sequence[str | RewardFunc] | None = None
    records: tuple[Records, Records | None] | None = None
    trl_tools: TrlTools = (None, None)

    def task(self, config: FinetuneConfig) -> Task:
        """The run's task: its kind decided once (:func:`kind_of`), made by its row of KINDS.

        Rows given in memory ride with it (``Task.given``), to be written with the run.
        """
        task = KINDS[kind_of(config, self)](config, self)
        return task if self.records is None else dataclasses.replace(task, given=self.records)


def make_task(
    config: FinetuneConfig,
    *,
    reward_funcs: Sequence[str | RewardFunc] | None = None,
    records: tuple[Records, Records | None] | None = None,
    trl_tools: TrlTools = (None, None),
) -> Task:
    """The run's task (its ``tokenizer`` the user's, or None: built in, or characters).

    Its kind decided once (:func:`kind_of`), then made by that kind's row of :data:`KINDS`: a
    built-in task or a Gymnasium id of text (no data), the user's rows played with tools and
    environments (``lm.episodes.tools``), or their prompts completed once each and scored by
    their reward functions.

    Args:
        config: the run's settings (``task`` names the reward functions, comma-separated).
        reward_funcs: callables that replace ``config.task``'s specs (from Python).
        records: the training and held-out records (from Python: in-memory datasets).
        trl_tools: TRL's ``tools=`` and ``environment_factory=`` from Python (None: --tools, --env).

    Raises:
        ValueError: bad data, tokenizer or reward functions: one line naming them.
    """
    return Given(reward_funcs, records, trl_tools).task(config)


def kind_of(config: FinetuneConfig, given: Given) -> str:
    """The run's kind of task, a row of :data:`KINDS`, from what it was given.

    ``built-in``: a built-in task's name (no functions given from Python); ``environment``: no
    data and no tools (a Gymnasium id of text, probed when made); ``episodes``: the user's rows
    with tools or environments (--tools, --env, TRL's); ``prompts``: else.

    Raises:
        ValueError: a task name that is neither built in nor a module's, without tools.
    """
    episodic, by_name = _episodic(config, given.trl_tools), given.reward_funcs is None
    if by_name and config.task not in BUILTIN and ":" not in config.task and not episodic:
        # a name no module holds: a typo, or a run made from Python's functions
        raise ValueError(
            f"unknown task {config.task!r}: choose one of {', '.join(BUILTIN)}, or give "
            "your own reward functions as FILE.py:fn or module:fn with --prompts FILE. A run "
            "made from Python with functions no module holds (a lambda, one defined in a "
            "function or a script) names them so in its config.json: continue or evaluate "
            "it from Python, giving them again (finetune(config, reward_funcs=[...], "
            "environment_factory=..., resume=DIR)), or move them to a module"
        )
    if by_name and config.task in BUILTIN:
        return "built-in"
    if config.prompts is None and given.records is None and not episodic:
        return "environment"
    return "episodes" if episodic else "prompts"


def _built_in(config: FinetuneConfig, given: Given) -> Task:
    """A built-in task by name (``lm.tasks``): it plays its own world."""
    return _own_world(config, given, builtin_task(config.task, config.prompts))


def _environment(config: FinetuneConfig, given: Given) -> Task:
    """A Gymnasium id of text spaces (``lm.episodes.gym``); not one: a task of prompts."""
    task = _text_task(config)
    if task is None:  # the user's reward functions, then, whose prompts are refused missing
        return _prompts(config, given)
    return _own_world(config, given, task)


def _prompts(config: FinetuneConfig, given: Given) -> Task:
    """The user's prompts completed once each, scored by their reward functions (TRL's)."""
    train, held, specs = _data(config, given, episodic=False)
    if config.max_turns is not None:
        raise ValueError(
            "--max-turns bounds episodes: a task of prompts has them with --tools or --env"
        )
    # the workers fork before a tokenizer's threads exist (codec_for loads it)
    weights, metric = config.reward_weights or None, config.eval_metric
    scorers = started(specs, weights, metric, timeout=config.reward_timeout)
    return _prompted(config, train, held, *scorers)


def _episodes(config: FinetuneConfig, given: Given) -> Task:
    """The user's rows played with tools and environments (:func:`_played`)."""
    train, held, specs = _data(config, given, episodic=True)
    # TASK a name alone: the environment's get_reward() is the reward (TRL's)
    specs = specs if given.reward_funcs is not None or ":" in config.task else []
    return _played(config, train, held, specs, given.trl_tools)


KINDS: dict[str, Callable[[FinetuneConfig, Given], Task]] = {
    "built-in": _built_in,
    "environment": _environment,
    "episodes": _episodes,
    "prompts": _prompts,
}
"""A kind of task (:func:`kind_of`) → its maker: the one table a new kind adds a row to.

Its names are the rollouts' too (``lm.build.ROLLOUTS``, ``Task.rollout``): a task of
``prompts`` has each completed once, one of ``episodes`` is played turn by turn; a ``built-in``
task is drawn as either, an ``environment`` (a Gymnasium id of text) as ``episodes``."""


def _data(
    config: FinetuneConfig, given: Given, *, episodic: bool
) -> tuple[Records, Records | None, list[Any]]:
    """The training and held-out records (:func:`_records`) and the reward functions' specs."""
    if given.reward_funcs is None:  # refused before its data is read
        refuse_unnamed("reward functions", config.task, "reward_funcs")
    train, held = _records(config, given.records, episodic, given.trl_tools)
    funcs = given.reward_funcs
    return train, held, list(funcs) if funcs is not None else config.task.split(",")


def _records(
    config: FinetuneConfig,
    records: tuple[Records, Records | None] | None,
    episodic: bool,
    given: TrlTools,
) -> tuple[Records, Records | None]:
    """The training and held-out records: given, read from ``--prompts``, or TRL's empty rows."""
    if config.prompts is None and records is None and episodic:
        records = _dataset_free(config, given)
    if config.prompts is None and records is None:
        raise ValueError(
            f"task {config.task!r} needs --prompts FILE (JSONL, JSON, CSV, Parquet, a "
            "save_to_disk directory, or one prompt a line)"
        )
    read = records is None  # from files: a collision is named by the file
    if records is None:
        assert config.prompts is not None
        records = read_files(config.prompts, config.eval_prompts)
    train, held = records
    train = check_records(train, "the training data")
    refuse_columns(train, f"--prompts {config.prompts}" if read else "the training data")
    if held is not None:
        held = check_records(held, "the held-out data")[: config.eval_limit]
        where = f"--eval-prompts {config.eval_prompts}" if read else "the held-out data"
        refuse_columns(held, where)
    return train, held


def _prompted(
    config: FinetuneConfig,
    train: Records,
    held: Records | None,
    rewards: Rewards,
    metric: Rewards | None,
) -> Task:
    """The prompts completed once each, scored by the reward functions (TRL's).

    ``rewards`` and ``metric`` (the accuracy's, ``--eval-metric``) are started; the task's
    ``close`` stops them, and so does a failure here.
    """

    def close() -> None:
        rewards.close()
        if metric is not None:
            metric.close()

    try:
        codec = codec_for(config, train + (held or []))
        t_max = config.max_completion_length or 16
        task = _split(config.task, train, codec, rewards, metric, t_max, close)
        # a signature that cannot take the call is refused now, no function called before the
        # run's first batch: one that cannot score it ends the run there, and a new run's
        # directory goes with it (runs.RunDir's discard)
        given = [*CALL, *_columns(train + (held or [])), *HANDED]  # TRL's call, whole
        for funcs in (rewards, metric):
            if funcs is not None:
                funcs.check(given)
        if held is not None:
            on_held = _split(config.task, held, codec, rewards, metric, t_max, close)
            task = dataclasses.replace(task, held_out=on_held)
    except BaseException:
        close()
        raise
    return task


def _positions(config: FinetuneConfig) -> int | None:
    """The positions of ``--model DIR`` (its config.json), which an episode's context must fit."""
    if config.model != "tiny" and Path(config.model).is_dir():
        return hf.positions_of(config.model)
    return None


def _episodic(config: FinetuneConfig, given: TrlTools) -> bool:
    """Whether the run plays episodes with tools or environments (--tools, --env, TRL's)."""
    return (
        bool(config.tools)
        or config.environment_factory is not None
        or any(x is not None for x in given)
    )


def _dataset_free(config: FinetuneConfig, given: TrlTools) -> tuple[Records, None]:
    """TRL's rows without a dataset: an empty user message each, ``reset()`` the prompt.

    As many rows as a batch has prompts; with a dict of environments, refused (a row must
    name its environment), as TRL refuses it.
    """
    factory = given[1] if given[1] is not None else config.environment_factory
    if factory is None or isinstance(factory, dict) or "=" in str(factory):
        raise ValueError(
            f"task {config.task!r} with tools needs --prompts FILE (rows naming their "
            "environment): without data, give one environment (--env module:Factory) whose "
            "reset() returns the prompt"
        )
    return [{"prompt": [{"role": "user", "content": ""}]}] * config.prompts_per_batch, None


def _played(
    config: FinetuneConfig,
    train: Records,
    held: Records | None,
    specs: list[Any],
    given: TrlTools,
) -> Task:
    """The rows played with tools and environments as episodes (``lm.episodes.tools``).

    The reward functions (``specs``) run in the toolbox's worker, called on each episode's
    whole conversation with ``environments=`` as TRL calls them; ``given``: (tools,
    environment_factory) from Python, or Nones (then ``config``'s ``--tools`` and ``--env``).
    """
    if config.eval_metric is not None:
        raise ValueError(
            "--eval-metric scores single completions: an episode is judged by its return "
            "(drop --eval-metric)"
        )
    positions, codec = _positions(config), codec_for(config, train + (held or []))
    t_max = config.max_completion_length or 16
    task = _encoded(config.task, train, codec, t_max)
    if held is not None:
        task = dataclasses.replace(task, held_out=_encoded(config.task, held, codec, t_max))
    tools, factory = given
    if tools is None:
        refuse_unnamed("tools", config.tools, "tools")
    if factory is None:
        refuse_unnamed("environment factory", config.environment_factory,
                           "environment_factory")  # fmt: skip
    settings = ToolSettings(
        schema=hf.tool_schema,
        max_tool_calls=config.max_tool_calls,
        tools=[t for t in config.tools.split(",") if t.strip()] if tools is None else tools,
        environment_factory=config.environment_factory if factory is None else factory,
        timeout=config.tool_timeout,
        rewards=specs,
        weights=config.reward_weights or None,
        reward_timeout=config.reward_timeout,
        max_turns=config.max_turns,
        positions=positions,
        workers=config.max_env_workers,
    )
    return with_tools(task, train, held, settings)


def _own_world(config: FinetuneConfig, given: Given, task: Task) -> Task:
    """A task without data (built in, or a Gymnasium id), checked against what it was given.

    It plays its own world: tools given to it (``--tools``, ``--env``, TRL's) are refused, as
    a tool the user named is never dropped without a word; so is ``--max-tool-calls`` (it has
    no tools to call), and ``--max-turns`` where its episodes take it (else refused too).
    """
    turns = task.max_turns is not None  # a task of turns: --max-turns bounds its episodes
    tools = _episodic(config, given.trl_tools)
    said = ["--tools, --env or TRL's tools"] if tools else []
    said += ["--max-tool-calls"] if config.max_tool_calls != _DEFAULT_CALLS else []
    said += ["--max-turns"] if config.max_turns is not None and not turns else []
    if said:
        task.close()
        raise ValueError(
            f"{' and '.join(said)} given: {config.task!r} plays its own world without them "
            "(tools are for a task of your prompts, --prompts)"
            + ("; its episodes' replies are bounded by --max-turns" if turns else "")
            + ": drop them"
        )
    if config.max_turns is not None:  # a built-in task of episodes: as many replies as asked
        task = dataclasses.replace(task, max_turns=config.max_turns)
    return task


_DEFAULT_CALLS = next(
    f.default for f in dataclasses.fields(FinetuneConfig) if f.name == "max_tool_calls"
)


def _text_task(config: FinetuneConfig) -> Task | None:
    """``config.task`` as a task of several turns, if a Gymnasium id of text spaces (else None).

    The module is imported in the worlds' worker (``lm.episodes.gym.probe``), never here. The
    tokenizer is the run's where it has one (:func:`tokenizer_dir`; characters without).
    """
    where, positions = tokenizer_dir(config), _positions(config)
    envs = probe(config.task, timeout=config.tool_timeout, workers=config.max_env_workers)
    if envs is None:
        return None
    try:
        tokenizer = None if where is None else hf.load_tokenizer(*where)
        return text_task(
            config.task,
            tokenizer=tokenizer,
            max_turns=config.max_turns,  # None: the environment's own end (its registered limit)
            envs=envs,
            positions=positions,
            t_max=config.max_completion_length or 16,
        )
    except BaseException:
        envs.close()
        raise


Dataset = Iterable[Mapping[str, Any]]
"""An in-memory dataset: its rows, each a mapping of columns (a ``datasets.Dataset`` is one)."""


class TrlInputs(TypedDict, total=False):
    """TRL's ``GRPOTrainer`` arguments that a run takes from Python (None: the config's)."""

    reward_funcs: Sequence[str | RewardFunc] | None
    train_dataset: Dataset | None
    eval_dataset: Dataset | None
    tools: Sequence[Tool] | None
    environment_factory: Factories | None


def task_for_run(
    config: FinetuneConfig, resume: str | Path | None = None, **trl: Unpack[TrlInputs]
) -> tuple[FinetuneConfig, Task]:
    """A run's config with its data's SHA-256 (:func:`user_data`), and its task (:func:`make_task`).

    ``trl``: TRL's ``reward_funcs``, ``train_dataset``, ``eval_dataset``, ``tools`` and
    ``environment_factory`` from Python (None or left out: the config's).
    """
    names = ("reward_funcs", "train_dataset", "eval_dataset")
    config, given = user_data(config, resume, *(trl.pop(k, None) for k in names), **trl)
    return config, given.task(config)


GIVEN = "train_dataset"
"""``data_sha256``'s key of the rows given in memory (TRL's ``train_dataset=`` and
``eval_dataset=``), hashed together."""

KEPT = {"train_dataset": "train_dataset.jsonl", "eval_dataset": "eval_dataset.jsonl"}
"""Where a run keeps the rows it was given in memory, in its directory (``runs.RUN_FILES``)."""


def _digest(records: tuple[Records, Records | None]) -> str:
    """SHA-256 of the given rows, as JSON (a value JSON has no form for: its text)."""
    return hashlib.sha256(json.dumps(records, sort_keys=True, default=str).encode()).hexdigest()


def keep_records(run_dir: str | Path, task: Task) -> None:
    """Write the rows ``task`` was given in memory (``Task.given``) into the run's directory.

    One JSON line a row (a value JSON has no form for is written as its text, as the
    SHA-256 reads it), so that ``evaluate`` and ``--resume`` read them from any directory
    (:func:`kept_records`). A task of files or of no data writes nothing.
    """
    from eligibility._io import atomic_write_text

    if task.given is None:
        return
    for name, rows in zip(KEPT.values(), task.given, strict=True):
        if rows is not None:
            lines = (json.dumps(r, sort_keys=True, default=str, ensure_ascii=False) for r in rows)
            atomic_write_text(Path(run_dir) / name, "".join(f"{x}\n" for x in lines))


def kept_records(run_dir: str | Path, config: FinetuneConfig) -> tuple[Records, Records | None]:
    """The rows a run was given in memory, read back from its directory (:func:`keep_records`).

    Raises:
        ValueError: the files are missing, unreadable, or not the rows the run's SHA-256
            names (edited since).
    """
    out: list[Records | None] = []
    for name in KEPT.values():
        path = Path(run_dir) / name
        if not path.is_file():
            out.append(None)
            continue
        try:
            out.append([json.loads(x) for x in path.read_text().splitlines()])
        except (OSError, ValueError) as err:
            raise ValueError(f"{path}: the run's rows cannot be read ({err})") from None
    train, held = out
    if train is None:
        raise ValueError(
            f"{Path(run_dir) / KEPT['train_dataset']} is missing: this run was given its "
            "prompts from Python (train_dataset=) and keeps them there; give them again "
            "(finetune(config, resume=RUN, train_dataset=..., eval_dataset=...))"
        )
    records = (train, held)
    if (config.data_sha256 or {}).get(GIVEN) != _digest(records):
        raise ValueError(
            f"{Path(run_dir) / KEPT['train_dataset']} (or {KEPT['eval_dataset']}) changed "
            "since the run began (its SHA-256 is not the one saved with the run)"
        )
    return records


def user_data(
    config: FinetuneConfig,
    resume: str | Path | None,
    reward_funcs: Sequence[str | RewardFunc] | None,
    train_dataset: Dataset | None,
    eval_dataset: Dataset | None,
    tools: Sequence[Tool] | None = None,
    environment_factory: Factories | None = None,
) -> tuple[FinetuneConfig, Given]:
    """The config with its data's SHA-256, and the in-memory rewards, records and TRL's tools.

    On a resume the SHA-256 are checked against the saved ones instead of replacing them.
    ``tools`` and ``environment_factory``: TRL's, from Python (they replace --tools, --env).

    Raises:
        ValueError: a resume whose data file changed since the run began, naming it.
    """
    records = None
    if train_dataset is not None:
        records = ([dict(r) for r in train_dataset], None)
        if eval_dataset is not None:
            records = (records[0], [dict(r) for r in eval_dataset])
        sums = {GIVEN: _digest(records)}
    elif resume is not None and GIVEN in (config.data_sha256 or {}):
        records = kept_records(resume, config)  # the rows the run was given, kept with it
        sums = {GIVEN: _digest(records)}
    else:
        sums = fingerprints(config)
    funcs = None if reward_funcs is None else list(reward_funcs)
    user = Given(funcs, records, (tools, environment_factory))
    if resume is None:
        return dataclasses.replace(config, data_sha256=sums), user
    for path, digest in sums.items():
        if config.data_sha256 and config.data_sha256.get(path) != digest:
            raise ValueError(
                f"{path} changed since the run began (its SHA-256 is not the one saved with "
                "the run): resume on the same data, or start a new run with another --out"
            )
    return config, user


__all__ = [
    "GIVEN",
    "KEPT",
    "KINDS",
    "Codec",
    "Given",
    "codec_for",
    "fingerprints",
    "keep_records",
    "kept_records",
    "kind_of",
    "make_task",
    "task_for_run",
    "tokenizer_dir",
    "user_data",
]
