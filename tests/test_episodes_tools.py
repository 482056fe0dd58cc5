"""Tools and environments in TRL's conventions: a class written for ``environment_factory`` runs
unchanged in the protected worker; a malformed or unknown call is a failed call, counted; a
factory that raises, a tool that hangs or exits is one line."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("transformers")

from eligibility.lm.edge.hf import tool_schema
from eligibility.lm.episodes.chat import Call, parse_calls
from eligibility.lm.episodes.toolbox import Toolbox, factories


def _box(tools=(), factory=None, timeout=10.0):
    return Toolbox(tools, factory, timeout=timeout, schema=tool_schema)


ENV = textwrap.dedent(
    '''
    import asyncio, sys, time

    class Counter:
        """Written for TRL's GRPOTrainer(environment_factory=Counter), nothing else."""

        def __init__(self):
            self.n = 0

        def reset(self, start=0, **kwargs):
            self.n = start
            return f"The counter starts at {start}."

        def increment(self, a: int) -> int:
            """Increment the counter.

            Args:
                a: The value to add.
            """
            print("the worker's prints go to stderr")
            self.n += a
            return self.n

        def get_reward(self) -> float:
            return float(self.n == 3)

    class Quiet:
        def reset(self, **kwargs):
            return None

        def ping(self) -> str:
            """Answer pong."""
            return "pong"

    class Async:
        def reset(self, **kwargs):
            self.n = 0

        async def add(self, a: int) -> int:
            """Add, awaiting.

            Args:
                a: The value to add.
            """
            await asyncio.sleep(0)
            self.n += a
            return self.n

        async def get_reward(self) -> float:
            return float(self.n)

    class Slow:
        def reset(self, **kwargs):
            return None

        def wait(self, s: float) -> str:
            """Sleep.

            Args:
                s: Seconds.
            """
            time.sleep(s)
            return "woke"

        def get_reward(self) -> float:
            return 1.0

    class Sleepy:
        def reset(self, **kwargs):
            return None

        def get_reward(self) -> float:
            time.sleep(60)
            return 1.0

    class Unsure:
        def reset(self, **kwargs):
            return None

        @property
        def is_success(self) -> bool:
            time.sleep(60)
            return True

        def get_reward(self) -> float:
            return 1.0

    def stuck(completions, **kwargs):
        time.sleep(60)

    class Picky:
        def reset(self, key=None, **kwargs):
            if key is None:
                raise ValueError("no key in this row")

        def get_reward(self) -> float:
            raise ValueError("nothing to score")

    class Generator:
        def reset(self, **kwargs):
            yield "text"

    class Bytes:
        def reset(self, **kwargs):
            return b"text"

    class Mute:
        def reset(self, **kwargs):
            return None

    class Shadow:
        def reset(self, **kwargs):
            return None

        def boom(self, x: int) -> int:
            """Shadow the standalone tool.

            Args:
                x: Anything.
            """
            return x

    class Broken:
        def __init__(self):
            raise RuntimeError("cannot start")

    def boom(x: int) -> int:
        """Raise.

        Args:
            x: Anything.
        """
        raise RuntimeError("boom")

    def hang(x: int) -> int:
        """Sleep.

        Args:
            x: Anything.
        """
        time.sleep(60)

    def leave(x: int) -> int:
        """Exit.

        Args:
            x: Anything.
        """
        sys.exit(3)
    '''
)


@pytest.fixture
def env_file(tmp_path):
    path = tmp_path / "my_env.py"
    path.write_text(ENV)
    return str(path)


def test_calls_are_read_and_a_malformed_one_is_a_failed_call():
    text = (
        'I will call. <tool_call>{"name": "increment", "arguments": {"a": 2}}</tool_call>'
        '<tool_call>{"name": "increment", "arguments": "{\\"a\\": 1}"}</tool_call>'
        "<tool_call>{not json}</tool_call><tool_call>[1]</tool_call>"
        '<tool_call>{"name": "increment"'
    )
    calls = parse_calls(text)
    assert calls[:2] == [Call("increment", {"a": 2}), Call("increment", {"a": 1})]
    assert [c.error is not None for c in calls] == [False, False, True, True, True]
    assert "cut before" in calls[-1].error
    assert parse_calls("no call here") == []


def test_a_trl_environment_runs_unchanged(env_file):
    """reset(**row) and its text, public methods as tools with their schemas, get_reward, a
    tool that raises or does not exist or is malformed: a failed call (its error the answer)."""
    box = _box([f"{env_file}:boom"], f"{env_file}:Counter").start()
    try:
        names = [s["function"]["name"] for s in box.schemas[None]]
        assert names == ["boom", "increment"]
        increment = box.schemas[None][1]["function"]
        assert increment["description"] == "Increment the counter."
        assert increment["parameters"]["properties"]["a"]["type"] == "integer"
        handle, observation = box.open({"start": 1, "prompt": "ignored by reset's **kwargs"})
        assert observation == "The counter starts at 1."
        assert box.call(handle, Call("increment", {"a": 2})) == ("3", False)
        assert box.reward(handle) == 1.0
        answer, failed = box.call(handle, Call("nope", {}))
        assert failed and "Tool nope not found" in answer
        answer, failed = box.call(handle, Call("boom", {"x": 1}))
        assert failed and "boom" in answer
        answer, failed = box.call(handle, parse_calls("<tool_call>{bad</tool_call>")[0])
        assert failed and "malformed" in answer
        box.release(handle)
        again, observation = box.open({"start": 0})
        assert box.call(again, Call("increment", {"a": 1})) == ("1", False)  # reset again
    finally:
        box.close()


def test_a_sleeping_get_reward_stops_at_the_tool_timeout(env_file):
    """72: get_reward() is bounded by --tool-timeout, as reset and the tools are (not by the
    batch's --reward-timeout added to it): one line naming it and the option."""
    from eligibility.lm.rewards import TrainerState

    box = Toolbox((), f"{env_file}:Sleepy", timeout=0.3, schema=tool_schema,
                  reward_timeout=3.0).start()  # fmt: skip
    try:
        handle, _ = box.open({})
        batch = {"prompts": [[]], "completions": [[]], "completion_ids": [[]], "columns": {}}
        with pytest.raises(ValueError) as err:
            box.settle([handle], batch, TrainerState())
        text = str(err.value)
        assert "get_reward() did not return within 0.3 s (--tool-timeout)" in text, text
        assert "\n" not in text
    finally:
        box.close()


@pytest.mark.parametrize(
    ("factory", "rewards", "words"),
    [
        ("Slow", ["stuck"], "my_env.py:stuck did not return within 0.2 s (--reward-timeout)"),
        ("Unsure", [], "is_success did not return within 0.2 s (--tool-timeout)"),
    ],
)
def test_a_hanging_reward_or_is_success_stops_at_its_own_timeout(env_file, factory, rewards,
                                                                 words):  # fmt: skip
    """90: a hanging reward function with --reward-timeout 20 --tool-timeout 60 was stopped
    after 80 s, the message naming 80 s and --tool-timeout; a hanging is_success with
    --tool-timeout 10 after 70 s. Each is bounded by the option that governs it, named."""
    import time

    from eligibility.lm.rewards import TrainerState

    timeouts = {"rewards": 0.2, "tools": 0.2}
    if rewards:  # the other bound long: the one that governs must be the one that stops it
        timeouts["tools"] = 30.0
    else:
        timeouts["rewards"] = 30.0
    box = Toolbox((), f"{env_file}:{factory}", timeout=timeouts["tools"], schema=tool_schema,
                  reward_timeout=timeouts["rewards"],
                  rewards=[f"{env_file}:{r}" for r in rewards]).start()  # fmt: skip
    try:
        handle, _ = box.open({})
        batch = {"prompts": [[]], "completions": [[]], "completion_ids": [[]], "columns": {}}
        start = time.perf_counter()
        with pytest.raises(ValueError) as err:
            box.settle([handle], batch, TrainerState())
        took = time.perf_counter() - start
    finally:
        box.close()
    text = str(err.value)
    assert words in text and "\n" not in text, text
    assert took < 5.0


def test_a_dict_of_factories_is_selected_by_the_rows_environment(env_file):
    box = _box((), {"counter": f"{env_file}:Counter", "quiet": f"{env_file}:Quiet"}).start()
    try:
        assert [s["function"]["name"] for s in box.schemas["quiet"]] == ["ping"]
        handle, observation = box.open({"environment": "quiet", "x": 1})
        assert observation is None and box.call(handle, Call("ping", {})) == ("pong", False)
        assert box.reward(handle) is None
        with pytest.raises(ValueError, match="row 3 has environment 'other': each row names one "
                           "of the environments given \\(counter, quiet\\)"):  # fmt: skip
            box.open({"environment": "other"}, 3)
        with pytest.raises(ValueError, match="row 4 has no environment field"):
            box.open({"x": 1}, 4)
    finally:
        box.close()


@pytest.mark.parametrize(
    ("tools", "factory", "call", "words"),
    [
        ((), "Broken", None, "the environment's factory raised RuntimeError: cannot start (at "),
        (
            ("leave",),
            None,
            Call("leave", {"x": 1}),
            "calling leave: the user's code called sys.exit(3)",
        ),
    ],
)
def test_bad_tools_and_factories_are_one_line(env_file, tools, factory, call, words):
    box = _box([f"{env_file}:{t}" for t in tools],
               None if factory is None else f"{env_file}:{factory}", timeout=1)  # fmt: skip
    with pytest.raises(ValueError) as err:
        box.start()
        handle, _ = box.open({})
        box.call(handle, call)
    box.close()
    assert words in str(err.value) and "\n" not in str(err.value)


def test_async_tools_and_get_reward_are_awaited(env_file):
    """75.2: an async tool's answer is its value, not ``<coroutine object …>``; an async
    get_reward is the reward."""
    box = _box((), f"{env_file}:Async").start()
    try:
        handle, _ = box.open({})
        assert box.call(handle, Call("add", {"a": 2})) == ("2", False)
        assert box.call(handle, Call("add", {"a": 3})) == ("5", False)
        assert box.reward(handle) == 5.0
    finally:
        box.close()


def test_a_tool_that_times_out_is_a_failed_call(env_file):
    """75.4: a tool past --tool-timeout is a failed call, counted, and the run goes on; the
    instance it holds is set aside (its later calls fail, its reward is None), the others work."""
    box = _box((), f"{env_file}:Slow", timeout=0.3).start()
    try:
        handle, _ = box.open({})
        answer, failed = box.call(handle, Call("wait", {"s": 30}))
        assert failed and "did not return within 0.3 s" in answer
        answer, failed = box.call(handle, Call("wait", {"s": 0}))
        assert failed and "still busy" in answer
        assert box.reward(handle) is None
        box.release(handle)
        other, _ = box.open({})
        assert box.call(other, Call("wait", {"s": 0})) == ("woke", False)
        assert box.reward(other) == 1.0
    finally:
        box.close()


@pytest.mark.parametrize(
    ("factory", "row", "words"),
    [
        (
            "Picky",
            {},
            r"environment 'picky' \(row 2\): reset\(\) raised ValueError: no key in "
            r"this row \(at my_env.py:\d+\)",
        ),
        (
            "Picky",
            {"key": 1},
            r"the environment's reward: get_reward\(\) raised ValueError: "
            r"nothing to score \(at my_env.py",
        ),
        ("Generator", {}, r"reset\(\) returned a generator \(<generator object"),
        ("Bytes", {}, r"reset\(\) returned a bytes \(b'text'\)"),
    ],
)
def test_a_reset_or_reward_that_fails_says_which_environment_method_and_row(
    env_file, factory, row, words
):
    """72.25, 72.31: a user's own ValueError arrives with its environment, method, row and
    place; a reset that is a generator or returns bytes is one line naming what it returned."""
    box = _box((), {"picky": f"{env_file}:{factory}"}).start()
    with pytest.raises(ValueError, match=words) as err:
        handle, _ = box.open({"environment": "picky", **row}, 2)
        box.reward(handle)
    box.close()
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("tools", "factory", "words"),
    [
        (("boom", "boom"), None, "two tools are named 'boom'"),
        (("boom",), "Shadow", r"tool 'boom' is both a standalone tool \(--tools\) and a method"),
    ],
)
def test_tools_of_one_name_are_refused(env_file, tools, factory, words):
    """72.24: never one of them silently dropped, or both offered under one name."""
    box = _box([f"{env_file}:{t}" for t in tools], factory and f"{env_file}:{factory}")
    with pytest.raises(ValueError, match=words):
        box.start()
    box.close()


@pytest.mark.parametrize(
    ("rewards", "tools", "factory", "words"),
    [
        (["nosuch_rewards_91:fmt"], (), "Counter", "loading the reward functions: nosuch_"),
        ([], ["nosuch_tools_91:add"], None, "loading the tools (--tools): nosuch_"),
        ([], (), "nosuch_envs_91:Env", "loading the environment factories (--env): nosuch_"),
    ],
)
def test_a_module_that_does_not_load_is_named_by_its_kind(env_file, rewards, tools, factory, words):
    """91: a reward module that does not import was blamed on "loading the tools and
    environments"; each kind is loaded apart, and its error says which it was."""
    if factory == "Counter":
        factory = f"{env_file}:Counter"
    box = Toolbox(tools, factory, timeout=10, schema=tool_schema, rewards=rewards)
    with pytest.raises(ValueError) as err:
        box.start()
    box.close()
    assert str(err.value).startswith(words) and "does not import" in str(err.value), err.value
    assert "\n" not in str(err.value)


def test_an_environment_with_no_tool_is_said(env_file, capfd):
    """72.24: an environment with no public method runs, with a note."""
    _box((), f"{env_file}:Mute").start().close()
    assert "has no public method: its episodes offer no tool" in capfd.readouterr().err


def test_env_names_given_twice_are_refused():
    """72.10: a name given twice in --env is refused (not the later silently kept)."""
    assert factories("a=x.py:A,b=x.py:B") == {"a": "x.py:A", "b": "x.py:B"}
    with pytest.raises(ValueError, match="names environment 'a' twice"):
        factories("a=x.py:A,a=x.py:B")


def test_a_worlds_note_speaks_for_the_command_running(capsys):
    """90: ``evaluate`` printed an environment's notes as ``eligibility finetune: note:``."""
    from eligibility._output import forward_warnings
    from eligibility.lm.episodes.worker import Worlds

    worlds = Worlds(lambda: None, timeout=1.0)  # never started
    with forward_warnings("evaluate"):
        worlds.note_once("an episode reached 2 replies (--max-turns)")
    worlds.note_once("again, outside a command")
    assert capsys.readouterr().err.splitlines() == [
        "eligibility evaluate: note: an episode reached 2 replies (--max-turns)",
        "eligibility finetune: note: again, outside a command",
    ]
