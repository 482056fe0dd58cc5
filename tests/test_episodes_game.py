"""The built-in game of several turns (``guess``): its world, episodes played together turn by
turn (the sampler's log-probs those the trainer recomputes on the whole episode), and
``eligibility finetune guess`` with metrics.csv's turn and tool columns."""

from __future__ import annotations

import csv

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eligibility.cli import main  # noqa: E402
from eligibility.lm.edge.model import TinyLM  # noqa: E402
from eligibility.lm.episodes.episode_rollout import play  # noqa: E402
from eligibility.lm.sample import token_logps  # noqa: E402
from eligibility.lm.tasks import EpisodicTask, make_task  # noqa: E402

TINY = ["--d-model", "8", "--n-head", "2", "--n-layer", "1", "--group-size", "2"]
TINY += ["--prompts-per-batch", "2", "--eval-every", "1", "--no-progress"]


def test_the_game_answers_higher_lower_right():
    task = make_task("guess")
    assert isinstance(task, EpisodicTask) and task.max_turns == 3
    ix = {s: i for i, s in enumerate(task.vocab)}
    world = task.world(3)  # the secret is 4
    said = world.step([ix["2"]], False)
    assert said.tokens == (ix["higher"], ix["|"]) and said.reward == 0 and not said.done
    assert world.step([ix["5"]], False).tokens == (ix["lower"], ix["|"])
    assert world.step([ix["higher"]], False).tokens == (ix["?"], ix["|"])  # not a number
    right = world.step([ix["4"]], False)
    assert (right.reward, right.done) == (1.0, True)


def test_episodes_played_together_are_scored_as_sampled():
    """Every live episode of a batch sampled together for up to K turns: the model's tokens are
    one a turn here (T = 1), the world's between them; each episode's log-probs at sampling
    (turn by turn, on its growing context) are those ``token_logps`` recomputes on the whole
    episode in one pass, on the model's tokens, and 0 elsewhere."""
    task = make_task("guess")
    torch.manual_seed(0)
    model = TinyLM(task.vocab_size, 8, 1, 2, 16)
    batch = play(model, task, [0, 1, 2, 3, 4] * 2, t_max=1, rng=np.random.default_rng(0))
    m = batch.completion_mask.bool()
    assert batch.lengths.tolist() == batch.turns.tolist()  # one model token a turn
    assert (batch.turns >= 1).all() and (batch.turns <= task.max_turns).all()
    world = {task.vocab.index(w) for w in ("higher", "lower", "?", "|")}
    for row, n in zip(batch.completion_ids.tolist(), (batch.turns * 3 - 2).tolist(), strict=True):
        assert set(row[1:n:3]) <= world and set(row[2:n:3]) == ({task.vocab.index("|")} & set(row))
    wins = batch.returns == 1.0
    assert 0 < int(wins.sum()) < len(wins)  # some found it, some did not
    with torch.no_grad():
        again = token_logps(model, batch, vocab_size=task.vocab_size)
    torch.testing.assert_close(again[m], batch.logps[m], rtol=0, atol=1e-5)
    assert (again[~m] == 0).all()


@pytest.mark.slow
def test_finetune_plays_the_game_and_logs_turns(tmp_path):
    """One update of ``finetune guess``: metrics.csv has the episodes' turns, tool calls (none
    in this game) and tool failures; the tokens counted are the model's."""
    out = tmp_path / "run"
    assert main(["finetune", "guess", *TINY, "--max-updates", "1", "--out", str(out)]) in (0, 1)
    (row,) = list(csv.DictReader((out / "metrics.csv").open()))
    assert 1 <= float(row["turns"]) <= 3
    assert float(row["tool_calls"]) == 0 and float(row["tool_failures"]) == 0
    assert float(row["mean_length"]) == float(row["turns"])  # the model's tokens: one a turn
    assert row["eval_accuracy"] != ""


def test_a_game_of_three_guesses_ends_by_its_rule_and_its_replies_are_one_token():
    """91.2: the third wrong guess ends the game by its rule (K_max is the game's length), so
    no episode of it is cut; a reply is one token by design (T = 1: no room for an EOS), so
    replies_cut says nothing (empty) rather than 1. Was: episodes_cut 0.78, replies_cut 0.92."""
    from eligibility.lm.episodes.episode_rollout import EpisodeRollout

    task = make_task("guess")
    torch.manual_seed(0)
    model = TinyLM(task.vocab_size, 8, 1, 2, 64)
    batch = play(model, task, list(range(5)) * 4, t_max=1, rng=np.random.default_rng(0))
    assert (batch.turns == 3).any() and not batch.cut.any()
    row = EpisodeRollout(task).columns(batch)
    assert row["episodes_cut"] == 0.0 and row["replies_cut"] is None


@pytest.mark.parametrize(
    "flags, said",
    [
        (["--tools", "nosuch.py:fn"], "plays its own world without them"),
        (["--env", "nosuch.py:Factory"], "plays its own world without them"),
    ],
)
def test_the_game_refuses_tools_of_its_own_world(tmp_path, capsys, flags, said):
    """Tools given to a game that plays its own world are one line and exit 2 before anything
    is written (every sampling and update option single completions take, episodes take)."""
    out = tmp_path / "run"
    code = main(["finetune", "guess", *TINY, "--max-updates", "1", *flags, "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and said in err and len(err.strip().splitlines()) == 1, err
    assert not out.exists()


@pytest.mark.slow
def test_the_game_is_learned_from_scratch(tmp_path):
    """The built-in model learns to win every game (a binary search) with the defaults."""
    out = tmp_path / "run"
    args = ["finetune", "guess", "--max-updates", "300", "--eval-every", "5"]
    assert main([*args, "--target-accuracy", "0.9", "--no-progress", "--out", str(out)]) == 0


def test_an_evaluation_plays_whole_episodes():
    """``evaluate``'s evaluation of a task of several turns: one greedy episode per game, its
    return the reward, a success a return of 1, an example the whole episode (the world's
    answers in it)."""
    from eligibility.lm.episodes.episode_rollout import evaluate_episodes

    task = make_task("guess")
    torch.manual_seed(0)
    result = evaluate_episodes(TinyLM(task.vocab_size, 8, 1, 2, 16), task, 1, 8, keep=5)
    assert result.completions == 5 and len(result.examples) == 5
    for _, ids, r in result.examples:
        words = [task.vocab[t] for t in ids]
        assert r in (0.0, 1.0) and len(words) in (1, 4, 7)  # 1 to 3 guesses
        assert set(words[1::3]) <= {"higher", "lower", "?"}  # the world's answers
        assert set(words[2::3]) <= {"|"}  # the template's header of the next turn
    assert 0.0 <= result.accuracy <= 1.0
    for e in result.episodes:  # 91: as messages, the game's answers the user's
        assert e["prompt"] == [{"role": "user", "content": "?"}] and "system" not in e
        replies = [m for m in e["completion"] if m["role"] == "assistant"]
        assert len(replies) == len(e["rewards"]) and all(m["content"] for m in replies)
        assert {m["content"] for m in e["completion"] if m["role"] == "user"} <= {
            "higher|", "lower|", "?|"
        }  # fmt: skip
    assert result.systems == []


@pytest.mark.slow
def test_the_update_takes_the_episodes_loss(monkeypatch):
    """On a task of several turns, ``finetune``'s draw plays episodes and its update backpropagates
    the episodes' loss (per-turn rewards over the model's tokens, T_max = K_max × the reply
    limit): the loss logged is the one it returned, on a batch of episodes."""
    from eligibility.lm import FinetuneConfig, finetune, objective, update
    from eligibility.lm.episodes import Episodes
    from eligibility.lm.episodes import episode_rollout as rollout

    seen, loss = [], objective.loss

    def spy(ell, credit, mask, settings, **kwargs):
        out = loss(ell, credit, mask, settings, **kwargs)
        t_max = settings.max_completion_length * credit.turns
        seen.append((ell.shape, t_max, float(out[0].detach())))
        return out

    drawn = []
    play = rollout.play
    monkeypatch.setattr(rollout, "play", lambda *a, **k: drawn.append(play(*a, **k)) or drawn[-1])
    monkeypatch.setattr(update.objective, "loss", spy)
    config = FinetuneConfig("guess", d_model=8, n_head=2, n_layer=1, group_size=2, max_updates=1,
                            eval_every=0, target_accuracy=None, progress=False)  # fmt: skip
    result = finetune(config)
    (batch,) = drawn
    assert isinstance(batch, Episodes) and seen
    shape, t_max, value = seen[-1]
    assert shape == batch.completion_ids.shape and t_max == 1 * make_task("guess").max_turns
    assert result.history[0]["loss"] == pytest.approx(value, rel=1e-6)


@pytest.mark.slow
def test_episodes_of_one_turn_leave_rows_of_zero_advantage_unscored_and_train_the_same(
    monkeypatch,
):
    """With K_max = 1 an episode's return credits each of its tokens (``Credit.returns_whole``),
    so with β = 0 a row of a tied group (A = 0) is left unscored, as a single completion's is;
    the run is the one that scores every row (the same rewards, losses and gradient norms), and
    at least one update scored none and one some. Several turns score every row."""
    from eligibility.lm import FinetuneConfig, finetune, objective, update

    config = FinetuneConfig("guess", d_model=8, n_head=2, n_layer=1, group_size=2,
                            prompts_per_batch=2, max_updates=4, eval_every=0, beta=0.0,
                            target_accuracy=None, progress=False, max_turns=1, lr=3e-2)  # fmt: skip
    seen = []

    def counted(credit, settings):
        seen.append(objective.live_rows(credit, settings))
        return seen[-1]

    monkeypatch.setattr(update, "live_rows", counted)
    fast = finetune(config)
    monkeypatch.setattr(update, "live_rows", lambda c, s: None)
    full = finetune(config)
    assert all(r is not None for r in seen) and len(seen) == 4
    assert any(not r.any() for r in seen) and any(r.any() for r in seen)
    for a, b in zip(fast.history, full.history, strict=True):
        assert a["mean_reward"] == b["mean_reward"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-7)
        assert a["grad_norm"] == pytest.approx(b["grad_norm"], rel=1e-4, abs=1e-7)
    seen.clear()
    monkeypatch.setattr(update, "live_rows", counted)
    finetune(config.with_changes(max_turns=2, max_updates=1))
    assert seen == [None]
