"""The per-model defaults' column, measured: a model directory never trained takes the
from-scratch column, a trained one the pretrained column, passed the same way; the choice and
the measured entropy are saved with the run and said once; ``--defaults`` overrides it; a
resume reads the saved choice and measures nothing."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from eligibility.lm import build, measure
from eligibility.lm.config import FinetuneConfig
from eligibility.lm.defaults import BY_MODEL, UNTRAINED, column_line, measured_column
from eligibility.lm.edge import device as devices

pytest.importorskip("transformers")

TRAIN = [("copy a", "a"), ("copy b", "b"), ("copy a b", "a b"), ("copy c d", "c d")]
REWARD = """
def exact(prompts, completions, completion_ids, answer, **kw):
    return [float(c == a) for c, a in zip(completions, answer)]
"""


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """Prompts, a reward, a random-init model directory and the same model trained to copy."""
    sys.path.insert(0, str(Path(__file__).parent))
    from lm_user import hf_kit

    root = tmp_path_factory.mktemp("kit")
    hf_kit.model_dir(root / "random")
    (root / "train.jsonl").write_text(
        "".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in TRAIN)
    )
    (root / "rewards.py").write_text(textwrap.dedent(REWARD))
    # trained: cross-entropy on each prompt as the run encodes it, then its answer and EOS
    task, model, _ = build.task_and_model(_config(root, "random", defaults="pretrained"))
    seqs = [[*p, *p[2:], task.eos_id] for p in task.prompts]  # BOS copy x… → x… EOS
    task.close()
    width = max(map(len, seqs))
    ids = torch.tensor([s + [task.eos_id] * (width - len(s)) for s in seqs])
    mask = torch.tensor([[1] * len(s) + [0] * (width - len(s)) for s in seqs])
    answer = torch.tensor(  # the loss on the answer and its EOS: the prompts are the user's
        [
            [0] * len(p) + [1] * (len(s) - len(p)) + [0] * (width - len(s))
            for p, s in zip(task.prompts, seqs, strict=True)
        ]
    )
    labels = ids.masked_fill(answer == 0, -100)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(150):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert float(loss.detach()) < 0.05  # it copies: trained, as a pretrained model has been
    model.eval().save_pretrained(root / "trained")
    hf_kit.tokenizer().save_pretrained(root / "trained")
    return root


def _config(kit: Path, model: str, **kw) -> FinetuneConfig:
    return FinetuneConfig(
        f"{kit}/rewards.py:exact",
        prompts=str(kit / "train.jsonl"),
        model=str(kit / model),
        max_completion_length=4,
        device="cpu",
        **kw,
    )


def _set_up(config: FinetuneConfig) -> FinetuneConfig:
    """The config the run's set-up resolves (the model loaded, and measured where auto)."""
    config, task, _policy, _ = build.task_and_policy(config)
    task.close()
    return config


# -- the rule and the measurement, against references we did not write -------------------


def test_measured_column_takes_scratch_from_rho_ln_v_up():
    v = 1000
    edge = UNTRAINED * math.log(v)
    assert measured_column(edge, v) == "scratch" and measured_column(math.log(v), v) == "scratch"
    assert (
        measured_column(np.nextafter(edge, 0), v) == "pretrained"
        and measured_column(0.0, v) == "pretrained"
    )
    with pytest.raises(ValueError, match="vocab_size"):
        measured_column(0.0, 1)


class _Fixed(torch.nn.Module):
    """A causal LM whose next-token logits are ``z`` at every position (the HF convention)."""

    def __init__(self, z: torch.Tensor) -> None:
        super().__init__()
        self.z = torch.nn.Parameter(z)

    def forward(self, input_ids, **kw):  # type: ignore[no-untyped-def]
        from types import SimpleNamespace

        b, t = input_ids.shape
        return SimpleNamespace(logits=self.z.expand(b, t, -1), past_key_values=None)


def test_sample_entropy_is_ln_v_for_uniform_logits_and_the_entropy_of_a_fixed_distribution():
    """Ĥ = −mean ln π(oₜ) over the model's samples: exactly ln V where every token is equally
    likely; within 4 standard errors of torch.distributions' entropy for a fixed skewed one."""
    v, prompts = 50, [[1, 2, 3], [4, 5]]
    uniform = measure.sample_entropy(_Fixed(torch.zeros(v)), prompts, vocab_size=v, eos_id=v + 1)
    assert uniform == pytest.approx(math.log(v), abs=1e-5)

    z = torch.linspace(0.0, 6.0, v)  # EOS is outside the V sampled: every row runs 16 tokens
    h = float(torch.distributions.Categorical(logits=z.double()).entropy())
    p = torch.softmax(z.double(), 0).numpy()
    sd = math.sqrt(float(p @ np.log(p) ** 2) - h**2) / math.sqrt(16 * 16)
    got = measure.sample_entropy(_Fixed(z), prompts, vocab_size=v, eos_id=v + 1, seed=3)
    assert abs(got - h) < 4 * sd and h < 0.9 * math.log(v)


def test_the_measured_column_resolves_what_was_left_to_the_table_and_nothing_else():
    """The set-up's re-resolution (``with_changes(defaults=…)``): a setting given stays, one
    left to the table moves to the new column; a copy made with ``dataclasses.replace`` (the
    CLI's ``--out``, the data's SHA-256) carries the list, less what it changed; the list goes
    through config.json; a resume holds only what the user gave against the run."""
    real = FinetuneConfig("repeat", model="pkg.mod:factory", lr=3e-4)
    assert (real.defaults, real.group_size, real.beta) == ("auto", 8, 0.0)
    measured = {"entropy": 2.0, "ln_v": 2.1}
    got = real.with_changes(defaults="scratch", model_entropy=measured)
    assert (got.lr, got.group_size, got.beta, got.max_kl) == (3e-4, 16, 0.02, math.inf)
    assert got.model_entropy == measured and "lr" not in got.defaulted
    copy = dataclasses.replace(real, out="/tmp/x")
    assert copy.defaulted == real.defaulted
    assert copy.with_changes(defaults="scratch").group_size == 16
    changed = dataclasses.replace(real, group_size=4)
    assert "group_size" not in changed.defaulted
    assert changed.with_changes(defaults="scratch").group_size == 4
    again = FinetuneConfig.from_dict(json.loads(json.dumps(got.to_dict(), default=str)))
    assert again.defaulted == got.defaulted and again.model_entropy == measured
    given = real.given()
    assert given["lr"] == 3e-4 and not {"group_size", "defaults", "model_entropy"} & set(given)
    with pytest.raises(ValueError, match="defaulted"):
        FinetuneConfig("repeat", defaulted=("no_such_setting",))


def test_trls_accumulation_holds_g_before_a_model_of_ones_own_is_measured(capsys):
    """TRL's batch is split into groups before the model is loaded: G left to the table is
    held at the pretrained column's, and said; a --defaults given or the tiny model choose it."""
    from eligibility.cli.finetune import _accumulation

    given = {"model": "pkg.mod:factory", "micro_batch_size": 8}
    said: list[str] = []
    _accumulation(4, given, said)
    assert (given["group_size"], given["prompts_per_batch"]) == (8, 4)
    assert "G 8" in said[0]
    scratch = {"model": "pkg.mod:factory", "micro_batch_size": 16, "defaults": "scratch"}
    _accumulation(4, scratch, [])
    assert "group_size" not in scratch and scratch["prompts_per_batch"] == 16 * 4 // 16


# -- a model directory, passed the same way, measured -------------------------------------


@pytest.mark.slow  # a user's task and a model directory: seconds each
def test_a_random_init_directory_takes_the_from_scratch_column(kit):
    config = _config(kit, "random")
    assert config.defaults == "auto" and config.lr == BY_MODEL["pretrained"]["lr"]  # until load
    got = _set_up(config)
    scratch = BY_MODEL["scratch"]
    assert got.defaults == "scratch"
    assert (got.lr, got.group_size, got.prompts_per_batch, got.beta, got.max_kl, got.dtype) == (
        scratch["lr"],
        scratch["group_size"],
        scratch["prompts_per_batch"],
        scratch["beta"],
        scratch["max_kl"],
        scratch["dtype"],
    )
    m = got.model_entropy
    assert m["ln_v"] == pytest.approx(math.log(12)) and m["entropy"] >= UNTRAINED * m["ln_v"]


@pytest.mark.slow  # a user's task and a model directory: seconds each
def test_a_trained_directory_takes_the_pretrained_column_and_a_given_setting_stays(kit):
    got = _set_up(_config(kit, "trained", beta=0.01))
    assert got.defaults == "pretrained"
    assert got.model_entropy["entropy"] < 0.5 * got.model_entropy["ln_v"]
    assert (got.lr, got.group_size, got.beta) == (BY_MODEL["pretrained"]["lr"], 8, 0.01)
    random = _set_up(_config(kit, "random", lr=3e-4, group_size=4))  # given: kept
    assert (random.defaults, random.lr, random.group_size, random.beta) == (
        "scratch",
        3e-4,
        4,
        0.02,
    )


@pytest.mark.slow  # a user's task and a model directory: seconds each
def test_a_copy_made_with_replace_keeps_the_table_where_it_was_and_the_users_setting(kit):
    """dataclasses.replace (the CLI's --out, the data's SHA-256) carries what was left to the
    table; a setting it changed is the user's, kept when the column changes."""
    config = dataclasses.replace(_config(kit, "random"), out=None)
    assert "lr" in config.defaulted and _set_up(config).lr == BY_MODEL["scratch"]["lr"]
    changed = dataclasses.replace(_config(kit, "random"), lr=2e-4)
    assert "lr" not in changed.defaulted and _set_up(changed).lr == 2e-4


def _refuse_measuring(monkeypatch, said: str) -> None:
    """The measurement's sampling (its rows) refused: the start's one sampling is the probe."""
    real = measure.sample

    def sample(model, prompts, **kw):
        if len(prompts) == measure.MEASURED_ROWS:
            raise AssertionError(said)
        return real(model, prompts, **kw)

    monkeypatch.setattr(measure, "sample", sample)


@pytest.mark.slow  # a user's task and a model directory: seconds each
def test_defaults_given_is_taken_without_measuring(kit, monkeypatch):
    _refuse_measuring(monkeypatch, "measured")
    pre = _set_up(_config(kit, "random", defaults="pretrained"))
    assert (pre.defaults, pre.lr, pre.model_entropy) == ("pretrained", 1e-5, {})
    scratch = _set_up(_config(kit, "trained", defaults="scratch"))
    assert (scratch.defaults, scratch.lr, scratch.beta) == ("scratch", 1e-3, 0.02)
    assert column_line(scratch).startswith(
        "--defaults scratch: from-scratch defaults, lr 0.001, G 16"
    )
    tiny = FinetuneConfig("repeat")
    assert tiny.defaults == "scratch" and tiny.lr == 1e-3 and "defaults" in tiny.defaulted
    assert FinetuneConfig("repeat", defaults="pretrained").lr == 1e-5
    with pytest.raises(ValueError, match="defaults"):
        FinetuneConfig("repeat", defaults="trained")  # type: ignore[arg-type]


@pytest.mark.slow  # a user's task and a model directory: seconds each
def test_the_run_saves_and_says_its_column_and_a_resume_measures_nothing(
    kit, tmp_path, capsys, monkeypatch
):
    from eligibility.cli import main

    out = tmp_path / "run"
    argv = ["finetune", f"{kit}/rewards.py:exact", "--model", str(kit / "random"), "--prompts",
            str(kit / "train.jsonl"), "--max-completion-length", "4", "--max-updates", "1",
            "--target-accuracy", "none", "--device", "cpu", "--no-progress",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    saved = json.loads((out / "config.json").read_text())
    assert (saved["defaults"], saved["lr"], saved["group_size"]) == ("scratch", 1e-3, 16)
    assert saved["model_entropy"]["entropy"] >= UNTRAINED * saved["model_entropy"]["ln_v"]
    err = capsys.readouterr().err.splitlines()
    line = [x for x in err if "defaults" in x]
    assert len(line) == 1 and "model looks untrained (entropy" in line[0]
    assert "from-scratch defaults, lr 0.001, G 16, 8 prompts a batch, β 0.02" in line[0]

    _refuse_measuring(monkeypatch, "measured again")
    again = ["finetune", "--resume", str(out), "--max-updates", "2", "--defaults", "auto",
             "--no-progress"]  # fmt: skip
    assert main(again) == 0
    assert json.loads((out / "config.json").read_text())["model_entropy"] == saved["model_entropy"]
    assert "model looks untrained" in capsys.readouterr().err
    assert main([*again[:4], "3", "--defaults", "pretrained"]) == 2
    assert "--defaults 'pretrained' (the run has 'scratch')" in capsys.readouterr().err
    # from Python: a config whose table was the provisional pretrained column resumes too
    from eligibility.lm.trainer import finetune

    fresh = _config(kit, "random", max_updates=3, target_accuracy=None, progress=False)
    assert finetune(fresh, resume=out).updates == 3


REAL_KIT = Path(
    __import__("os").environ.get("ELIGIBILITY_KIT", Path.home() / ".cache" / "eligibility-kit")
)


@pytest.mark.slow  # two real models loaded on the CPU: a minute
@pytest.mark.skipif(
    not (REAL_KIT / "models").is_dir(), reason=f"no real-model kit at {REAL_KIT} (make kit)"
)
def test_the_real_kits_pretrained_models_take_the_pretrained_column():
    """SmolLM2-135M-Instruct and Gemma 3 270M, passed as any directory is, on a tuning task's
    prompts: measured trained (needs the kit: make kit)."""
    rewards = REAL_KIT / "tasks" / "rewards.py"
    for model in sorted((REAL_KIT / "models").iterdir()):
        config = FinetuneConfig(
            f"{rewards}:reward",
            prompts=str(REAL_KIT / "tasks" / "add" / "train.jsonl"),
            model=str(model),
            max_completion_length=16,
            device="cpu",
        )
        got = _set_up(config)
        m = got.model_entropy
        assert m["entropy"] < UNTRAINED * m["ln_v"], (model, m)
        assert got.defaults == "pretrained" and got.lr == BY_MODEL["pretrained"]["lr"], model


@pytest.mark.slow  # a user's task and a model directory: seconds each
@pytest.mark.parametrize("model", ["random", "trained"])
def test_one_sampling_serves_the_measurement_the_hold_and_the_probe(kit, monkeypatch, model):
    """Measured, the start samples the model once: that padded batch is the probe too, and the
    forward it chose and held is the run's (no second hold). The column is the one that the
    unpadded measurement (the sampling before) gives, its Ĥ the same to float32 rounding; with
    --defaults given, the probe is the one sampling; under LoRA the policy holds its wrapper's
    forward where it is placed, with no second sampling."""

    from eligibility.lm.edge import forward as forwards

    calls = {"sample": 0, "hold": 0}
    real_sample, real_hold = measure.sample, forwards.discrepancy

    def sample(*a, **kw):
        calls["sample"] += 1
        return real_sample(*a, **kw)

    def hold(*a, **kw):
        calls["hold"] += 1
        return real_hold(*a, **kw)

    monkeypatch.setattr(measure, "sample", sample)
    monkeypatch.setattr(forwards, "discrepancy", hold)
    config, task, policy, _ = build.task_and_policy(_config(kit, model))
    task.close()
    assert calls["sample"] == 1
    held = calls["hold"]
    assert held >= 1  # a transformers model's forward is held once, at the start
    assert policy.forward.kind  # the run's forward: the one held, not held again
    assert calls["hold"] == held

    # the unpadded sampling of before, on the same rows and draws: the same column
    rows = [list(task.prompts[i % len(task.prompts)]) for i in range(measure.MEASURED_ROWS)]
    with devices.precision(config.dtype, torch.device("cpu")):  # the run's precision
        before = real_sample(
            policy.model, rows, vocab_size=task.vocab_size, eos_id=task.eos_id,
            max_new_tokens=4, rng=np.random.default_rng(measure.MEASURED_SEED),
        )  # fmt: skip
    mask = before.completion_mask
    entropy = float(-(before.logps * mask).sum() / mask.sum())
    assert config.model_entropy["entropy"] == pytest.approx(entropy, rel=1e-4)
    assert config.defaults == measured_column(entropy, task.vocab_size)
    calls["sample"] = 0
    given = build.task_and_policy(_config(kit, model, defaults="pretrained"))
    given[1].close()
    assert calls["sample"] == 1  # the probe
    calls["sample"], held = 0, calls["hold"]  # LoRA's wrapper: another model, held once placed
    _, task, lora, _ = build.task_and_policy(_config(kit, model, lora_r=4))
    task.close()
    assert calls["sample"] == 1 and calls["hold"] > held
    held = calls["hold"]
    assert lora.forward.kind and calls["hold"] == held  # the run's: not held again


# -- a measurement kept: the same files, prompts, draws and libraries measure nothing anew -----


def test_a_measurements_key_changes_with_each_thing_it_is_computed_from(tmp_path, monkeypatch):
    """The key: the model's files (a file rewritten, added or renamed), every input and the
    measurement's version each give another; the same of each gives the same; a model that is
    not a path has none."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"w" * 64)
    inputs = {"prompts": [(1, 2, 3)], "seed": 7, "max_new_tokens": 4, "dtype": torch.float32}
    key = measure.measurement_key(str(model), **inputs)
    assert key == measure.measurement_key(str(model), **inputs)  # the same: the same key
    keys = {key}
    for changed in ({"prompts": [(1, 2, 4)]}, {"seed": 8}, {"max_new_tokens": 5},
                    {"dtype": torch.bfloat16}):  # fmt: skip
        keys.add(measure.measurement_key(str(model), **{**inputs, **changed}))
    weights = model / "model.safetensors"
    st = weights.stat()
    weights.write_bytes(b"v" * 64)  # the same size, written anew
    import os

    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    keys.add(measure.measurement_key(str(model), **inputs))
    (model / "extra.bin").write_bytes(b"")
    keys.add(measure.measurement_key(str(model), **inputs))
    monkeypatch.setattr(measure, "MEASUREMENT", measure.MEASUREMENT + 1)
    keys.add(measure.measurement_key(str(model), **inputs))
    assert len(keys) == 8
    assert measure.measurement_key("pkg.mod:factory", **inputs) is None


def test_a_kept_measurement_is_read_back_and_a_bad_one_is_not(tmp_path, monkeypatch):
    monkeypatch.setenv(measure.CACHE_DIR, str(tmp_path / "cache"))
    assert measure.cache_dir() == tmp_path / "cache"
    assert measure.remembered("k") is None and measure.remembered(None) is None
    measure.remember("k", 2.25)
    assert measure.remembered("k") == 2.25
    for bad in ("{", '{"entropy": "x"}', '{"entropy": NaN}', "[]"):
        (tmp_path / "cache" / "measured" / "k.json").write_text(bad)
        assert measure.remembered("k") is None, bad
    (tmp_path / "file").write_text("")  # a directory that cannot be made keeps nothing
    monkeypatch.setenv(measure.CACHE_DIR, str(tmp_path / "file" / "cache"))
    measure.remember("k", 1.0)
    assert measure.remembered("k") is None
    monkeypatch.delenv(measure.CACHE_DIR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert measure.cache_dir() == tmp_path / "xdg" / "eligibility"


@pytest.mark.slow  # a user's task and a model directory: seconds each
def test_a_second_start_reads_the_kept_measurement_and_a_changed_file_is_measured_anew(
    kit, tmp_path, monkeypatch
):
    """The second start of a run on the same model, prompts and seed samples only the two-token
    probe (the forward still held), and takes the same column and Ĥ; with the weights' file
    touched, or another precision, the measurement samples again; another seed reads it."""
    import shutil

    monkeypatch.setenv(measure.CACHE_DIR, str(tmp_path / "cache"))
    shutil.copytree(kit / "random", tmp_path / "random")
    calls: list[int] = []
    real = measure.sample

    def sample(model, prompts, **kw):
        calls.append(len(prompts))
        return real(model, prompts, **kw)

    monkeypatch.setattr(measure, "sample", sample)

    def start(**kw):
        calls.clear()
        config = FinetuneConfig(f"{kit}/rewards.py:exact", prompts=str(kit / "train.jsonl"),
                                model=str(tmp_path / "random"), max_completion_length=4,
                                device="cpu", **kw)  # fmt: skip
        config, task, policy, _ = build.task_and_policy(config)
        task.close()
        return config, list(calls), policy.forward.kind

    first, sampled, kind = start()
    assert sampled == [measure.MEASURED_ROWS]
    again, probed, kind_again = start()
    assert probed == [2] and kind_again == kind
    assert (again.defaults, again.model_entropy) == (first.defaults, first.model_entropy)
    other, probed, _ = start(seed=first.seed + 1)  # another seed: the same draws, kept
    assert probed == [2] and other.model_entropy == first.model_entropy
    # measured in the precision given: the one `auto` resolved to is kept, the other is not
    assert sorted([start(dtype="float32")[1], start(dtype="bfloat16")[1]]) == [[2], [16]]
    weights = next((tmp_path / "random").glob("*.safetensors"))
    weights.touch()
    assert start()[1] == [measure.MEASURED_ROWS]  # the file written anew: measured


def test_the_run_saves_the_config_resolve_resolved_and_nothing_rewrites_it(kit, tmp_path):
    """One resolve step (``lm.build.resolve``): the user's words, the data, the model's facts,
    the measured column and what ``auto`` resolves to, before the policy is built; the run's
    config.json is that config, field for field (but ``out``, the run's own)."""
    from eligibility.lm.trainer import finetune

    config = _config(kit, "random", max_updates=1, target_accuracy=None, progress=False)
    resolved = build.resolve(config)
    resolved.task.close()
    got = resolved.config
    assert got.defaults == "scratch" and got.model_entropy is not None  # measured
    assert "auto" not in (got.dtype, got.importance_sampling) and got.data_sha256
    out = tmp_path / "run"
    finetune(dataclasses.replace(config, out=str(out)))
    from eligibility.runs import load_config

    assert load_config(out, FinetuneConfig) == dataclasses.replace(got, out=str(out))
