"""Tools and environments in TRL's conventions: a class written for ``environment_factory`` runs
unchanged in the protected worker; a malformed or unknown call is a failed call, counted; a
factory that raises, a tool that hangs or exits is one line."""

from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("transformers")

from eligibility.lm.episodes.tools import Call, Toolbox, parse_calls

ENV = textwrap.dedent(
    '''
    import sys, time

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
    box = Toolbox([f"{env_file}:boom"], f"{env_file}:Counter", timeout=10).start()
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


def test_a_dict_of_factories_is_selected_by_the_rows_environment(env_file):
    box = Toolbox((), {"counter": f"{env_file}:Counter", "quiet": f"{env_file}:Quiet"}).start()
    try:
        assert [s["function"]["name"] for s in box.schemas["quiet"]] == ["ping"]
        handle, observation = box.open({"environment": "quiet", "x": 1})
        assert observation is None and box.call(handle, Call("ping", {})) == ("pong", False)
        assert box.reward(handle) is None
        with pytest.raises(ValueError, match="environment 'other' is none of counter, quiet"):
            box.open({"environment": "other"})
    finally:
        box.close()


@pytest.mark.parametrize(
    ("tools", "factory", "call", "words"),
    [
        ((), "Broken", None, "environment factory raised: RuntimeError('cannot start')"),
        pytest.param(
            ("hang",),
            None,
            Call("hang", {"x": 1}),
            "calling hang: the user's code did not return within 1 s (--tool-timeout)",
            marks=pytest.mark.slow,
        ),
        (
            ("leave",),
            None,
            Call("leave", {"x": 1}),
            "calling leave: the user's code called sys.exit(3)",
        ),
    ],
)
def test_bad_tools_and_factories_are_one_line(env_file, tools, factory, call, words):
    box = Toolbox([f"{env_file}:{t}" for t in tools],
                  None if factory is None else f"{env_file}:{factory}", timeout=1)  # fmt: skip
    with pytest.raises(ValueError) as err:
        box.start()
        handle, _ = box.open({})
        box.call(handle, call)
    box.close()
    assert words in str(err.value) and "\n" not in str(err.value)
