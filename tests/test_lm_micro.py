"""`finetune --micro-batch-size M`: an update's scoring and backward pass M sequences at a time.

Truth: autograd's gradient of the one-pass loss (the batch scored at once, one backward), in
float64 on a tiny random model; the accumulated gradient of the chunks must equal it for every
aggregation, KL, scale and ratio row of the option table (a normaliser or an advantage taken
per chunk would not).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eligibility.lm import FinetuneConfig, finetune, limits, micro  # noqa: E402
from eligibility.lm.build import task_and_model  # noqa: E402
from eligibility.lm.edge.loaders import Dims  # noqa: E402
from eligibility.lm.edge.model import TinyLM  # noqa: E402
from eligibility.lm.objective import loss, reuse_loss  # noqa: E402
from eligibility.lm.sample import sample, token_logps  # noqa: E402
from eligibility.torch import options  # noqa: E402

V, G, T_MAX = 6, 4, 4


@functools.cache
def _setup(seed: int = 0):
    """The models, sampled batch, rewards and reference log-probs, built once a seed and
    shared by the table's rows: each row only reads them (``_grads`` clears the gradients it
    takes, and no row steps the weights)."""
    torch.manual_seed(seed)
    model = TinyLM(V, d_model=16, n_layer=1, n_head=2, max_positions=12).double().eval()
    ref = TinyLM(V, d_model=16, n_layer=1, n_head=2, max_positions=12).double().eval()
    prompts = [[1, 2, 3], [4, 2], [5, 5, 1, 2]]
    batch = sample(
        model,
        [p for p in prompts for _ in range(G)],
        vocab_size=V,
        max_new_tokens=T_MAX,
        rng=np.random.default_rng(seed),
        eos_id=0,
    )
    n = batch.completion_ids.shape[0]
    rewards = torch.from_numpy(np.random.default_rng(seed + 1).random(n))
    with torch.no_grad():
        ref_logps = token_logps(ref, batch, vocab_size=V)
    return model, batch, rewards, ref_logps


def _grads(model, batch, loss_of, size, kl="none", live=None):
    model.zero_grad(set_to_none=True)
    score = lambda rows: token_logps(model, rows, vocab_size=V)  # noqa: E731
    logps, value, _ = micro.backward(score, loss_of, batch, size=size, kl=kl, live=live)
    return [p.grad.clone() for p in model.parameters()], logps, value


def _same(a, b):
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-13)


def _check(settings, reuse=None):
    model, batch, rewards, ref_logps = _setup()
    mask = batch.completion_mask.bool()
    settings = dict(settings, ref_logps=ref_logps, max_completion_length=T_MAX)
    if reuse is None:
        loss_of = lambda ell: loss(ell, rewards, mask, group_size=G, **settings)[0]  # noqa: E731
    else:
        old = batch.logps.double() - 0.05
        loss_of = lambda ell: reuse_loss(  # noqa: E731
            ell, old, rewards, mask, group_size=G, **settings, **reuse
        )[0]
    want, logps_1, value_1 = _grads(model, batch, loss_of, None)
    for size in (3, 5):  # chunks cutting every group apart (G = 4), and a ragged last chunk
        got, logps_m, value_m = _grads(model, batch, loss_of, size, kl=settings["kl"])
        _same(got, want)
        torch.testing.assert_close(logps_m, logps_1, rtol=1e-12, atol=1e-14)
        torch.testing.assert_close(value_m, value_1, rtol=1e-12, atol=1e-14)


BASE = dict(baseline="rloo", scale="none", aggregation="sequence-sum", kl="k3", beta=0.1)


@pytest.mark.parametrize("aggregation", options.names("aggregation"))
def test_each_aggregation_row_keeps_the_one_chunk_gradient(aggregation):
    """Σ over chunks of the chunk's share = the one-pass gradient (the batch's normaliser)."""
    _check(dict(BASE, aggregation=aggregation))


@pytest.mark.parametrize("kl", options.names("kl"))
def test_each_kl_row_keeps_the_one_chunk_gradient(kl):
    """Including sequence-reward, whose R̃ = R − β D couples the rows through the baseline."""
    _check(dict(BASE, kl=kl, aggregation="token-mean"))


@pytest.mark.parametrize("scale", options.names("scale"))
def test_each_scale_row_keeps_the_one_chunk_gradient(scale):
    """Group and batch statistics of the rewards: taken over the batch, before chunking."""
    _check(dict(BASE, scale=scale, baseline="mean"))


@pytest.mark.parametrize("ratio", options.names("ratio"))
def test_each_ratio_of_a_reuse_step_keeps_the_one_chunk_gradient(ratio):
    """A further step on the batch (K > 1), PPO-clipped, with the reward-placed KL."""
    _check(dict(BASE, kl="sequence-reward"), reuse=dict(ratio=ratio, clip=0.2))


@pytest.mark.parametrize("aggregation", options.names("aggregation"))
@pytest.mark.parametrize("importance", ["none", "token-mask"])
def test_rows_of_zero_advantage_left_unscored_keep_the_gradient(aggregation, importance):
    """Without a KL, a row with Aᵢ = 0 (a tied group, an unscorable completion) has no
    gradient: scoring only the others (lm.objective.live_rows), whole or M at a time, gives the
    one-pass gradient; the loss's value too, their log-probs the sampler's."""
    from eligibility.lm.objective import live_rows

    model, batch, _, _ = _setup()
    mask = batch.completion_mask.bool()
    rewards = torch.tensor([1.0, 0, 0, 1] + [1.0] * 4 + [0.5, 0, 0.5, 0], dtype=torch.float64)
    scorable = torch.ones(12, dtype=torch.bool)
    scorable[10] = False
    settings = dict(BASE, kl="none", aggregation=aggregation, ref_logps=None, scorable=scorable,
                    max_completion_length=T_MAX, importance_sampling=importance,
                    sampler_logps=batch.logps.double() - 0.01)  # fmt: skip
    live = live_rows(rewards, group_size=G, **settings)
    assert live.tolist() == [True] * 4 + [False] * 4 + [True, True, False, True]
    loss_of = lambda ell: loss(ell, rewards, mask, group_size=G, **settings)[0]  # noqa: E731
    want, _, value_1 = _grads(model, batch, loss_of, None)
    for size in (None, 3):
        got, logps, value = _grads(model, batch, loss_of, size, live=live)
        _same(got, want)
        torch.testing.assert_close(value, value_1, rtol=1e-12, atol=1e-14)
        assert torch.equal(logps[~live], batch.logps[~live].double())


def test_chunks_cover_the_rows_once():
    assert micro.chunks(7, 3) == [slice(0, 3), slice(3, 6), slice(6, 7)]
    assert micro.chunks(7, None) == micro.chunks(7, 7) == micro.chunks(7, 99) == [slice(0, 7)]


KW = dict(
    task="repeat", d_model=16, n_head=2, n_layer=1, group_size=4, prompts_per_batch=2,
    eval_every=0, target_accuracy=None, progress=False, max_updates=2, device="cpu",
)  # fmt: skip


@pytest.mark.slow
def test_finetune_with_micro_batches_takes_the_same_steps():
    """Two updates at M = 3 (N = 8) move the weights as M = N does (float32: the changes
    agree to a tolerance scaled to their size)."""
    task, model, _ = task_and_model(FinetuneConfig(**KW))
    task.close()
    start = model.state_dict()
    full = finetune(FinetuneConfig(**KW)).model.state_dict()
    chunked = finetune(FinetuneConfig(**KW, micro_batch_size=3)).model.state_dict()
    for k in start:
        d_full, d_chunk = full[k] - start[k], chunked[k] - start[k]
        scale = float(d_full.abs().max()) + 1e-12
        torch.testing.assert_close(d_chunk, d_full, rtol=0, atol=1e-3 * scale)


def test_the_memory_estimate_counts_m_sequences():
    """The activations' term scales with M, the weights' does not."""
    dims = Dims(d_model=64, n_layer=2, n_head=4, vocab=50, params=1000)
    full, part = limits.update_bytes(128, 20, dims), limits.update_bytes(8, 20, dims)
    assert full - 4 * 5 * 1000 == 16 * (part - 4 * 5 * 1000)


def test_trl_batch_names_become_ours(capsys):
    """per_device_train_batch_size M is --micro-batch-size M; M × gradient_accumulation_steps K
    completions (TRL's batch) are --prompts-per-batch M·K/G; --bf16 alone is --dtype bfloat16."""
    from eligibility.cli import build_parser
    from eligibility.lm.trl_names import trl_batch

    argv = ["finetune", "repeat", "--bf16", "--per_device_train_batch_size", "4",
            "--gradient_accumulation_steps", "8", "--num_generations", "4"]  # fmt: skip
    args = build_parser().parse_args(argv)
    assert (args.dtype, args.micro_batch_size, args.trl_accumulation) == ("bfloat16", 4, 8)
    said = "\n".join(args.trl_notes)  # said once the config is built (errors first)
    assert "--per_device_train_batch_size 4 is --micro-batch-size 4 (" in said
    assert trl_batch(8, 4, 4) == 8
    with pytest.raises(ValueError, match="not a whole number of groups of G = 8"):
        trl_batch(3, 4, 8)
    with pytest.raises(ValueError, match="needs --per_device_train_batch_size"):
        trl_batch(3, None, 8)


def test_trls_accumulation_with_g_left_to_the_table_runs_from_the_command_line(tmp_path, capsys):
    """Bug: --gradient_accumulation_steps without --group-size (G left to the model's column)
    ended in a TypeError traceback; G is the column's (tiny 16, pretrained 8), and without
    --per_device_train_batch_size it is one line on stderr and exit 2."""
    import json

    from eligibility.cli import main
    from eligibility.cli.finetune import _accumulation
    from eligibility.lm.defaults import BY_MODEL

    out = tmp_path / "run"
    argv = ["finetune", "repeat", "--per_device_train_batch_size", "8",
            "--gradient_accumulation_steps", "4", "--max-updates", "1", "--d-model", "8",
            "--n-head", "2", "--n-layer", "1", "--eval-every", "0", "--target-accuracy", "none",
            "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    saved = json.loads((out / "config.json").read_text())
    g = BY_MODEL["scratch"]["group_size"]
    assert (saved["group_size"], saved["prompts_per_batch"]) == (g, 8 * 4 // g)
    assert "--gradient_accumulation_steps 4 is --prompts-per-batch 2" in capsys.readouterr().err
    given = {"model": "pkg.mod:factory", "micro_batch_size": 8}  # a pretrained model: G = 8
    _accumulation(4, given, [])
    assert given["prompts_per_batch"] == 8 * 4 // BY_MODEL["pretrained"]["group_size"]
    capsys.readouterr()
    assert main(["finetune", "repeat", "--gradient_accumulation_steps", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "needs --per_device_train_batch_size" in err[0]


def test_bad_micro_batch_size_names_the_flag():
    with pytest.raises(ValueError, match="--micro-batch-size"):
        FinetuneConfig(**KW, micro_batch_size=0)
