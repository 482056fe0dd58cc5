"""The command-line dispatcher: bad input and missing extras are one line and exit status 2."""

from __future__ import annotations

import sys

import pytest

from eligibility.cli import main


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "CartPole-v1", "--total-steps", "10", "--no-progress"],
        ["lab", "--problem", "chain", "--samples", "30"],
    ],
)
def test_a_missing_extra_names_the_install_command(argv, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "gymnasium", None)  # `import gymnasium` now fails
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "needs gymnasium" in err and "pip install 'eligibility[train]'" in err


def test_an_unknown_command_is_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["nonsense"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "invalid choice" in err
