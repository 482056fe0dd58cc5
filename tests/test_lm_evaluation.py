"""The held-out evaluation at the sampler's pace: each distinct prompt once, in batches as large
as one update's memory allows, the figures those of every record computed in training batches.

Truth: the evaluation as it ran before (every record sampled, the training batch's size at a
time: :func:`_per_record`, written here), on the built-in tasks with the built-in model and a
``transformers`` Llama; the memory bound from ``lm.limits``' own update estimate.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eligibility.lm import evaluation, limits  # noqa: E402
from eligibility.lm.edge.loaders import Dims  # noqa: E402
from eligibility.lm.edge.model import TinyLM  # noqa: E402
from eligibility.lm.evaluation import Evaluation, completion_record, evaluate_policy  # noqa: E402
from eligibility.lm.sample import sample  # noqa: E402
from eligibility.lm.tasks import make_task  # noqa: E402


def _per_record(model, task, t_max: int, chunk: int) -> Evaluation:
    """The greedy evaluation as it was: every record sampled, ``chunk`` at a time."""
    ev = task.evaluation
    index = list(range(len(ev.prompts)))
    correct, rewards, lengths, examples = [], [], [], []
    for start in range(0, len(index), chunk):
        part = index[start : start + chunk]
        batch = sample(model, [ev.prompts[i] for i in part], vocab_size=ev.vocab_size,
                       max_new_tokens=t_max, eos_id=ev.eos_id)  # fmt: skip
        completions, ended = batch.completions(), batch.ended.tolist()
        r, ok, *_ = ev.rewards(part, completions, ended)
        correct.append(ev.correct(part, completions, ended, r))
        rewards.append(r[ok])
        lengths.append(batch.lengths.numpy())
        examples += [(p, list(c), float(x)) for p, c, x in zip(part, completions, r, strict=True)]
    c, r_all = np.concatenate(correct), np.concatenate(rewards)
    shown = [completion_record(ev, *x, {}) for x in examples]  # the same examples, as records
    mean_length = float(np.concatenate(lengths).mean())
    return Evaluation(float(np.nanmean(c)), float(r_all.mean()), mean_length, len(index),
                      examples, shown)  # fmt: skip


def _llama(vocab: int, seed: int):
    sys.path.insert(0, str(Path(__file__).parent))
    pytest.importorskip("transformers")
    from lm_user import hf_kit

    return hf_kit.model(vocab, seed=seed).eval()


def _trained_a_little(task, seed: int) -> TinyLM:
    """A built-in model whose greedy completions differ between prompts (not all EOS)."""
    torch.manual_seed(seed)
    return TinyLM(task.vocab_size, d_model=16, n_layer=2, n_head=2, max_positions=32).eval()


@pytest.mark.parametrize("name", ["repeat", "reverse", "sum"])
@pytest.mark.parametrize(
    "kind",
    ["tiny", pytest.param("llama", marks=pytest.mark.slow)],  # transformers' import: s
)
def test_the_accuracy_is_the_per_record_evaluations(name, kind):
    """Each distinct prompt once, all of them in one batch: every figure as before, where the
    training batch (8 rows) was the evaluation's."""
    task = make_task(name)
    for seed in range(3):
        model = _trained_a_little(task, seed) if kind == "tiny" else _llama(task.vocab_size, seed)
        before = _per_record(model, task, 6, 8)
        now = evaluate_policy(model, task, 6, len(task.prompts), keep=len(task.prompts))
        assert now == before


def test_a_prompt_held_by_several_records_is_completed_once(monkeypatch):
    """Records that repeat a prompt (each with its own answer) share its one greedy completion:
    the rows sampled are the distinct prompts; the scores are every record's, as before."""
    base = make_task("reverse")
    prompts = (*base.prompts, *base.prompts[:5], base.prompts[0])
    task = dataclasses.replace(base, prompts=prompts, score=lambda i, c, e: float(i % 2))
    model = _trained_a_little(task, 1)
    rows: list[int] = []

    def counted(model, prompts, **kw):
        rows.append(len(prompts))
        return sample(model, prompts, **kw)

    before = _per_record(model, task, 5, 4)
    monkeypatch.setattr(evaluation, "sample", counted)
    now = evaluate_policy(model, task, 5, 4, keep=len(prompts))
    assert sum(rows) == len(base.prompts) < len(prompts) and max(rows) <= 4
    assert now == before and now.mean_reward == pytest.approx(len(prompts) // 2 / len(prompts))


@pytest.mark.parametrize("b", [4, 2])
@pytest.mark.parametrize(
    "dims",
    [
        Dims(vocab=12, d_model=16, n_layer=2, n_head=2, params=0),
        Dims(vocab=49152, d_model=576, n_layer=30, n_head=9, params=0),  # SmolLM2-135M
    ],
)
def test_the_evaluations_rows_need_no_more_than_an_updates_activations(dims, b):
    """n = eval_rows(M): sample_bytes(n) ≤ the activations update_bytes counts for M rows (the
    weights aside), sample_bytes(n + 1) above them unless n is M; never fewer than M."""
    for m, length in ((8, 40), (64, 140), (1, 300)):
        update = limits.update_bytes(m, length, dims, activation_bytes=b)  # dims' |θ| is 0
        n = limits.eval_rows(m, length, dims, b)
        need = [limits.sample_bytes(k, length, dims, activation_bytes=b) for k in (n, n + 1)]
        assert n >= m and (n == m or need[0] <= update < need[1])
    deep = limits.eval_rows(64, 140, dims, b)
    assert deep >= (5 * 64 if dims.n_layer > 2 else 64)  # a deep model's sampler: 2d, not 16d


def test_prompts_that_share_a_head_are_evaluated_as_each_computed_whole(monkeypatch):
    """Prompts that all start with the same tokens (a chat template's system turn): the head
    is computed once, and every figure and completion is the one of the prompts computed whole,
    a record at a time in training batches (``_per_record``, which samples without it)."""
    pytest.importorskip("transformers")
    from eligibility.lm.edge.forward import Forward

    base = make_task("reverse")
    head = (1, 4, 2, 3, 3, 4)  # BOS, then a turn every prompt has
    task = dataclasses.replace(base, prompts=tuple(head + p[1:] for p in base.prompts))
    heads = []
    after = Forward.after_prefix
    monkeypatch.setattr(
        Forward, "after_prefix", lambda f, i, m, h: heads.append(h.tolist()) or after(f, i, m, h)
    )
    for seed in range(2):
        model = _llama(task.vocab_size, seed)
        before = _per_record(model, task, 6, 8)
        assert heads == []
        now = evaluate_policy(model, task, 6, len(task.prompts), keep=len(task.prompts))
        assert heads == [list(head)] and now == before
        heads.clear()


def test_eval_on_start_scores_the_weights_before_the_first_update_and_leaves_the_run_as_it_was(
    monkeypatch, tmp_path
):
    """``eval_on_start`` (TRL's name): the result's ``start_accuracy`` is the per-record greedy
    accuracy (``_per_record``) of the weights the run began with, taken before the first update
    (the weights then move); the training rows are those of the same run without it (the
    start evaluation draws no training randomness)."""
    import copy
    import csv

    from eligibility.lm import FinetuneConfig, finetune
    from eligibility.lm.evaluator import Evaluator

    seen: list = []
    own = Evaluator.evaluate

    def kept(self, run):  # the weights each evaluation scored
        seen.append(copy.deepcopy(run.learner.policy.model).eval())
        return own(self, run)

    monkeypatch.setattr(Evaluator, "evaluate", kept)
    size = dict(group_size=2, prompts_per_batch=2, d_model=16, n_layer=2, n_head=2)
    rows, results = {}, {}
    for start in (True, False):
        config = FinetuneConfig("reverse", max_updates=2, eval_every=2, eval_on_start=start,
                                target_accuracy=None, progress=False, seed=3, lr=3e-3,
                                out=str(tmp_path / str(start)), **size)  # fmt: skip
        results[start] = finetune(config)
        with open(tmp_path / str(start) / "metrics.csv", newline="") as f:
            rows[start] = [
                {k: v for k, v in r.items() if not k.startswith(("time/", "wall", "tokens_per"))}
                for r in csv.DictReader(f)
            ]
    assert rows[True] == rows[False] and len(rows[True]) == 2
    assert results[False].start_accuracy is None and len(seen) == 3  # start, 2; then 2
    first, last = seen[0], seen[1]
    pairs = zip(first.parameters(), last.parameters(), strict=True)
    moved = [(a - b).abs().max() for a, b in pairs]
    assert max(moved) > 0  # the start's weights are not the trained ones
    task = results[True].task
    want = _per_record(first, task, task.max_completion_length, 4)
    assert results[True].start_accuracy == want.accuracy


def test_cli_eval_on_start_says_the_start_in_its_line_and_json_a_value_given_it_is_exit_2(
    tmp_path, capsys
):
    """``--eval-on-start``: the one result line says where the accuracy began, ``--format
    json`` holds ``start_accuracy`` (null without the flag); ``--eval-on-start=yes`` is one
    line on stderr, exit 2, and no run directory."""
    import json

    from eligibility.cli import main

    tiny = ["--max-updates", "1", "--eval-every", "0", "--group-size", "2",
            "--prompts-per-batch", "1", "--d-model", "8", "--n-head", "2", "--n-layer", "1",
            "--target-accuracy", "none", "--no-progress"]  # fmt: skip
    assert main(["finetune", "repeat", *tiny, "--eval-on-start", "--out", str(tmp_path / "a")]) == 0
    line = capsys.readouterr().out
    assert " (from " in line and "before the first update)" in line, line
    argv = ["finetune", "repeat", *tiny, "--format", "json", "--out", str(tmp_path / "b")]
    for flag, present in ((["--eval-on-start"], True), ([], False)):
        assert main([*argv[:-1], str(tmp_path / f"b{present}"), *flag]) == 0
        start = json.loads(capsys.readouterr().out)["start_accuracy"]
        assert (start is not None and 0.0 <= start <= 1.0) if present else start is None
    with pytest.raises(SystemExit) as stop:
        main(["finetune", "repeat", "--eval-on-start=yes", "--out", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "--eval-on-start" in err, err
    assert not (tmp_path / "c").exists()
