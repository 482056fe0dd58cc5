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
