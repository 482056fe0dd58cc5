"""finetune's loss: its options are the table's rows, ``--kl none`` means no KL term, and its
update (token_logps then objective.loss) gets each row's verdict on the check's exact problems."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from eligibility.check import check  # noqa: E402
from eligibility.cli import main  # noqa: E402
from eligibility.lm.config import FinetuneConfig  # noqa: E402
from eligibility.lm.objective import loss as finetune_loss  # noqa: E402
from eligibility.lm.sample import Completions, token_logps  # noqa: E402
from eligibility.torch import options, sequence_reinforce_loss  # noqa: E402

TINY = ["--d-model", "8", "--n-head", "2", "--n-layer", "1", "--group-size", "2"]
TINY += ["--prompts-per-batch", "1", "--max-updates", "1", "--eval-every", "0", "--no-progress"]


def test_kl_none_is_no_kl_term_whatever_beta():
    """`--kl none` with β at its default is a config (it was refused), and its loss is the one
    without a KL term (no reference log-probs needed); kl=None, whose meaning changed, is a
    ValueError that says so."""
    config = FinetuneConfig("repeat", kl="none")
    assert config.beta > 0
    g = torch.Generator().manual_seed(0)
    logps = -torch.rand(4, 3, generator=g)
    rewards, mask = torch.tensor([1.0, 0.0, 1.0, 1.0]), torch.ones(4, 3, dtype=torch.bool)
    common = dict(group_size=2, baseline="rloo", scale="none", aggregation="sequence-sum")
    value, _ = finetune_loss(logps, rewards, mask, max_completion_length=3, kl="none",
                             beta=config.beta, ref_logps=None, **common)  # fmt: skip
    without, _ = finetune_loss(logps, rewards, mask, max_completion_length=3, kl="none",
                               beta=0.0, ref_logps=None, **common)  # fmt: skip
    assert torch.equal(value, without)
    with pytest.raises(ValueError, match="kl=None meant the reward-to-go"):
        sequence_reinforce_loss(logps, rewards, mask, kl=None, beta=0.1, ref_logps=logps)


@pytest.mark.slow
def test_kl_none_alone_runs_with_the_default_beta(tmp_path, capsys):
    """`--kl none` with β at its default: no KL term (no reference model), not a refusal."""
    out = tmp_path / "run"
    assert main(["finetune", "repeat", "--kl", "none", *TINY, "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["kl"] == "none"
    assert "beta must be" not in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["baseline", "scale", "aggregation", "kl"])
def test_finetune_offers_the_table_rows(kind):
    """Every row of the table is a choice of finetune's flag, and nothing else is."""
    for name in options.names(kind):
        assert getattr(FinetuneConfig("repeat", **{kind: name}), kind) == name
    with pytest.raises(ValueError, match=kind):
        FinetuneConfig("repeat", **{kind: "no-such-row"})


# -- finetune's update on the check's exact problems, in the model form ---------------------------


def finetune_update(kind: str, name: str):
    """finetune's loss of one update, as its trainer computes it, on a check batch: the log-probs
    recomputed by ``lm.sample.token_logps`` (its model call with position_ids, the shift, the
    masks), then ``lm.objective.loss`` (advantages, aggregation, KL) with this row and the
    defaults of the other kinds. The reference log-probs are the problem's reference policy's."""
    choice = {**options.DEFAULTS, kind: name}

    def fn(model, batch):
        mask = batch.completion_mask.long()
        completions = Completions(
            prompt_ids=batch.prompt_ids,
            prompt_mask=torch.ones_like(batch.prompt_ids),
            completion_ids=batch.completion_ids,
            completion_mask=mask,
            logps=batch.old_logps,
            ended=torch.ones(len(mask), dtype=torch.bool),
        )
        logps = token_logps(model, completions, vocab_size=model.vocab_size)
        value, _ = finetune_loss(
            logps,
            batch.rewards,
            mask.bool(),
            group_size=batch.group_size,
            max_completion_length=batch.max_completion_length,
            beta=batch.beta,
            ref_logps=batch.ref_logps[:, : mask.shape[1]],
            **choice,
        )
        return value

    return fn


def test_finetunes_default_update_is_unbiased_on_the_exact_problem():
    """The fast representative: the defaults, the model form, 30 calls on ``kl`` (β > 0)."""
    report = check(finetune_update("kl", "reward-to-go"), sequence=True, form="model",
                   problem="kl", samples=30)  # fmt: skip
    (p,) = report.problems
    assert (p.verdict, p.diagnosis) == ("unbiased", None)


@pytest.mark.slow
@pytest.mark.parametrize("row", [pytest.param(o, id=f"{o.kind}:{o.name}") for o in options.ROWS])
def test_every_finetune_option_gets_its_rows_verdict_in_the_model_form(row):
    """Every option finetune offers (every row of the table), through finetune's own code path,
    at the N the check chooses on every problem."""
    report = check(finetune_update(row.kind, row.name), sequence=True, form="model")
    assert {p.problem: (p.verdict, p.diagnosis) for p in report.problems} == row.verdicts


def test_one_calling_convention_for_the_lab_finetune_and_hugging_face_models():
    """model(input_ids, attention_mask=..., position_ids=...).logits, the last two optional with
    Hugging Face's defaults, for the lab's exact model and finetune's built-in one alike."""
    from eligibility.lab.sequence.builtin import PROBLEMS
    from eligibility.lm.edge.model import TinyLM

    ids = torch.tensor([[1, 2, 3, 0], [2, 1, 1, 3]])
    full = torch.ones_like(ids)
    positions = torch.arange(4).expand(2, 4)
    lab = PROBLEMS["length"]().model
    tiny = TinyLM(5, 8, 1, 2, 16)
    for model in (lab, tiny):
        plain = model(ids).logits
        named = model(ids, attention_mask=full, position_ids=positions).logits
        assert plain.shape[:2] == (2, 4) and torch.equal(plain, named)
    shifted = lab(ids, position_ids=positions + 1).logits  # the lab's table is read at the ids
    assert not torch.equal(shifted, lab(ids).logits)


def test_the_loss_and_its_reuse_take_one_settings_object_or_its_keywords():
    """``LossSettings`` is the one declaration: as an object or as keywords, the same loss."""
    from eligibility.lm.objective import LossSettings, live_rows, reuse_loss

    torch.manual_seed(0)
    ell = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    r, m = torch.tensor([1.0, 0.0, 0.5, 0.5], dtype=torch.float64), torch.ones(4, 3)
    kw = dict(group_size=2, baseline="rloo", scale="none", aggregation="sequence-sum",
              max_completion_length=3, kl="none", beta=0.0, ref_logps=None)  # fmt: skip
    settings = LossSettings(**kw)
    assert torch.equal(finetune_loss(ell, r, m, settings)[0], finetune_loss(ell, r, m, **kw)[0])
    old = ell.detach()
    assert torch.equal(reuse_loss(ell, old, r, m, settings)[0], reuse_loss(ell, old, r, m, **kw)[0])
    assert live_rows(r, settings).tolist() == [True, True, False, False]  # a tied group: A = 0
    with pytest.raises(ValueError, match="not both"):
        finetune_loss(ell, r, m, settings, beta=0.1)


# -- one loss for every batch, held against a plain loop ------------------------------------

# Two batches of N = 4 rows in groups of G = 2, T = 5 positions: single completions (lengths
# 5, 2, 3, 1: a mask that is a prefix) and episodes of two turns (the world's tokens, mask 0,
# between the replies; row 3 ended after its first turn, −1 on padding).
COMPLETION_MASK = [[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]]
EPISODE_MASK = [[1, 1, 0, 1, 1], [1, 0, 0, 1, 0], [1, 1, 0, 1, 1], [1, 1, 0, 0, 0]]
EPISODE_TURN = [[0, 0, 0, 1, 1], [0, 0, 0, 1, -1], [0, 0, 0, 1, 1], [0, 0, -1, -1, -1]]
TURN_REWARDS = [[0.5, 1.0], [0.0, 0.25], [1.0, 0.0], [0.75, 0.0]]


def _plain_loss(ell, mask, turn, turn_rewards, aggregation, t_max):
    """−Σᵢ,ₜ wᵢ,ₜ Âᵢ,ₜ ℓᵢ,ₜ and Âᵢ,ₖ, one number at a time (RLOO of each turn's reward-to-go,
    G = 2; each aggregation's weight as its row's formula says)."""
    n, g = len(mask), 2
    k_max = len(turn_rewards[0])
    togo = [[sum(r[j:]) for j in range(k_max)] for r in turn_rewards]
    adv = [
        [togo[i][k] - sum(togo[j][k] for j in range(i // g * g, i // g * g + g) if j != i) / (g - 1)
         for k in range(k_max)]
        for i in range(n)
    ]  # fmt: skip
    count = [sum(row) for row in mask]
    width, tokens = max(count), sum(count)
    halves = [sum(count[: n // 2]), sum(count[n // 2 :])]
    weight = {
        "sequence-sum": lambda i: 1 / n,
        "constant": lambda i: 1 / (n * t_max),
        "constant-sum": lambda i: 1 / t_max,
        "sequence-mean": lambda i: 1 / (n * max(count[i], 1)),
        "token-mean": lambda i: 1 / tokens,
        "micro-batch-token-mean": lambda i: 1 / (2 * halves[i // (n // 2)]),
        "token-sum-norm": lambda i: 1 / width,
        "padded-width": lambda i: 1 / (n * width),
    }[aggregation]
    total = 0.0
    for i in range(n):
        for t in range(len(mask[i])):
            if mask[i][t]:
                total -= weight(i) * adv[i][turn[i][t]] * float(ell[i, t])
    return total, adv


@pytest.mark.parametrize("aggregation", options.names("aggregation"))
def test_the_one_loss_is_a_plain_loop_for_completions_and_for_episodes(aggregation):
    """``lm.objective.loss`` takes one path for every batch: single completions' rewards [N]
    and episodes' :class:`Credit` of two turns both give −Σᵢ,ₜ wᵢ,ₜ Âᵢ,ₜ ℓᵢ,ₜ computed one
    token at a time, on every aggregation row, and hand back Âᵢ,ₖ per row and turn."""
    from eligibility.lm.credit import Credit

    ell = -torch.rand(4, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    settings = dict(group_size=2, baseline="rloo", scale="none", aggregation=aggregation,
                    kl="none", beta=0.0, ref_logps=None)  # fmt: skip
    m = torch.tensor(COMPLETION_MASK, dtype=torch.bool)
    rewards = torch.tensor([r[0] for r in TURN_REWARDS], dtype=torch.float64)
    value, a = finetune_loss(ell, rewards, m, max_completion_length=5, **settings)
    turn = [[0 if x else -1 for x in row] for row in COMPLETION_MASK]
    want, adv = _plain_loss(ell, COMPLETION_MASK, turn, [[r[0]] for r in TURN_REWARDS],
                            aggregation, t_max=5)  # fmt: skip
    assert float(value) == pytest.approx(want, rel=1e-12, abs=1e-15)
    torch.testing.assert_close(a, torch.tensor(adv, dtype=a.dtype), rtol=0, atol=1e-15)  # [N, 1]

    m = torch.tensor(EPISODE_MASK, dtype=torch.bool)
    credit = Credit(torch.tensor(TURN_REWARDS, dtype=torch.float64), torch.tensor(EPISODE_TURN),
                    "reward-to-go", turns=2)  # fmt: skip
    value, a = finetune_loss(ell, credit, m, max_completion_length=3, **settings)
    want, adv = _plain_loss(ell, EPISODE_MASK, EPISODE_TURN, TURN_REWARDS, aggregation, t_max=6)
    assert float(value) == pytest.approx(want, rel=1e-12, abs=1e-15)
    torch.testing.assert_close(a, torch.tensor(adv, dtype=a.dtype), rtol=0, atol=1e-15)  # [N, 2]


def test_the_rows_to_score_are_read_from_the_credit():
    """``live_rows`` of a one-turn credit is its rewards' rule (a tied group's rows, A = 0, left
    unscored, the same as of the rewards [N]); a credit of several turns, or a KL, scores every
    row."""
    from eligibility.lm.credit import Credit
    from eligibility.lm.objective import live_rows

    kw = dict(group_size=2, baseline="rloo", scale="none", aggregation="sequence-sum",
              max_completion_length=3, kl="none", beta=0.0, ref_logps=None)  # fmt: skip
    r, mask = torch.tensor([1.0, 0.0, 0.5, 0.5]), torch.ones(4, 3)
    one = Credit.of_completions(r, mask)
    tied = [True, True, False, False]
    assert live_rows(one, **kw).tolist() == live_rows(r, **kw).tolist() == tied
    assert live_rows(Credit(r[:, None], torch.zeros(4, 3, dtype=torch.long)), **kw) is not None
    two = Credit(torch.stack([r, r], 1), torch.zeros(4, 3, dtype=torch.long), turns=2)
    assert live_rows(two, **kw) is None
    assert live_rows(one, **{**kw, "kl": "sequence-reward", "beta": 0.1}) is None
