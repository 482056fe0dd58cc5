"""`finetune --dtype auto|float32|bfloat16` and `--device cpu|cuda|auto`.

Truth: the choice of ``--dtype auto`` read from torch's own feature query, stood in for by a
monkeypatched ``native_bf16`` (so each outcome is tested on any machine); the float32 gradient
of the same loss (autograd) for the bf16 update, within the tolerance bf16's 8-bit mantissa
allows; the plain-loop sampler, the check's exact problems and an uninterrupted run for the
tests on CUDA (marked ``gpu``: skipped, with the reason, where torch sees no CUDA device; never
counted as a pass).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eligibility.lm import FinetuneConfig, finetune  # noqa: E402
from eligibility.lm.edge import device  # noqa: E402
from eligibility.lm.edge.model import TinyLM  # noqa: E402
from eligibility.lm.edge.ranks import Ranks  # noqa: E402
from eligibility.lm.objective import loss  # noqa: E402
from eligibility.lm.sample import sample, token_logps  # noqa: E402

V, G = 9, 4
NO_CUDA = (
    f"no CUDA device: torch {torch.__version__} (CUDA build {torch.version.cuda}) sees none "
    "here; these run where one is, under `make gpu` (`make test` hides it: tests/conftest.py)"
)


def _grad(model, batch, rewards, dtype):
    model.zero_grad(set_to_none=True)
    with device.precision(dtype, torch.device("cpu")):
        logps = token_logps(model, batch, vocab_size=V)
    value, _ = loss(logps, rewards, batch.completion_mask.bool(), group_size=G, baseline="rloo",
                    scale="none", aggregation="sequence-sum", max_completion_length=6,
                    kl="none", beta=0.0, ref_logps=None)  # fmt: skip
    value.backward()
    return torch.cat([p.grad.flatten() for p in model.parameters()]), logps.detach()


def test_the_bf16_gradient_holds_against_the_float32_one():
    """Under autocast (--dtype bfloat16) the weights and their gradient stay float32, and the
    gradient is the float32 one to a relative error ‖g₁₆ − g₃₂‖ / ‖g₃₂‖ < 0.02 (bf16 keeps 8
    mantissa bits, ε = 2⁻⁸ ≈ 0.004 a product; measured on this model at seeds 0, 1, 2: 0.0039,
    0.0048, 0.0043), cosine > 0.999."""
    torch.manual_seed(0)
    model = TinyLM(V, d_model=32, n_layer=2, n_head=4, max_positions=16).eval()
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 2]]
    batch = sample(model, [p for p in prompts for _ in range(G)], vocab_size=V,
                   max_new_tokens=6, rng=np.random.default_rng(0), eos_id=0)  # fmt: skip
    rewards = torch.from_numpy(np.random.default_rng(1).random(len(prompts) * G)).float()
    g32, l32 = _grad(model, batch, rewards, "float32")
    g16, l16 = _grad(model, batch, rewards, "bfloat16")
    assert all(p.dtype == torch.float32 for p in model.parameters()) and g16.dtype == torch.float32
    assert l16.dtype == torch.float32 and not torch.equal(l16, l32)  # bf16 ran: not the same
    error = float((g16 - g32).norm() / g32.norm())
    cosine = float(torch.nn.functional.cosine_similarity(g16, g32, dim=0))
    assert error < 0.02 and cosine > 0.999, (error, cosine)


def test_bf16_sees_each_step_of_the_weights():
    """The run holds one bf16 context open across its updates: a forward after an in-place
    Adam step must use the new weights (autocast's cast cache would keep the old ones)."""
    torch.manual_seed(0)
    model = TinyLM(V, d_model=16, n_layer=1, n_head=2, max_positions=8).eval()
    ids = torch.tensor([[1, 2, 3]])
    with device.precision("bfloat16", torch.device("cpu")):
        before = model(input_ids=ids).logits
        before.float().sum().backward()
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))
        after = model(input_ids=ids).logits
    with torch.no_grad():
        want = model(input_ids=ids).logits  # float32, the new weights
    assert not torch.equal(after, before)
    torch.testing.assert_close(after.float(), want, rtol=0.05, atol=0.05 * float(want.abs().max()))


KW = dict(
    task="repeat", d_model=16, n_head=2, n_layer=1, group_size=4, prompts_per_batch=2,
    eval_every=0, target_accuracy=None, progress=False, max_updates=2,
)  # fmt: skip


@pytest.mark.slow
def test_a_bf16_run_keeps_float32_weights_and_checkpoints(tmp_path):
    from safetensors.numpy import load_file

    out = tmp_path / "run"
    result = finetune(FinetuneConfig(**KW, dtype="bfloat16", device="cpu", out=str(out)))
    assert all(p.dtype == torch.float32 for p in result.model.parameters())
    assert {str(v.dtype) for v in load_file(out / "checkpoint.safetensors").values()} <= {
        "float32",
        "int64",
    }


def test_device_names():
    assert device.resolve("cpu") == torch.device("cpu")
    assert device.resolve("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="--device cuda: torch sees no CUDA device"):
            device.resolve("cuda")
    with pytest.raises(ValueError, match="--device"):
        FinetuneConfig("repeat", device="tpu")


def _mapped_from(path: Path, t) -> bool:
    """Whether ``t``'s first byte lies in a mapping of the file ``path`` (/proc/self/maps)."""
    where, inode = t.data_ptr(), os.stat(path).st_ino
    for line in Path("/proc/self/maps").read_text().splitlines():
        span, _, _, _, node = line.split()[:5]
        lo, hi = (int(x, 16) for x in span.split("-"))
        if lo <= where < hi:
            return int(node) == inode
    return False


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads Linux's /proc/self/maps")
def test_a_cpu_policy_trains_weights_of_its_own_not_the_files_mapping(tmp_path):
    """A model loaded from safetensors holds its weights in a private mapping of the file (the
    first write to each page copies it: the first Adam step's); the CPU policy's trainable
    weights are copies in memory of the process's own, the same values, a tied weight still
    one parameter, and a frozen weight left where it is."""
    transformers = pytest.importorskip("transformers")
    from eligibility.lm.edge.loaders import build_model
    from eligibility.lm.policy import Policy

    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=48,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, head_dim=8, max_position_embeddings=64,
                                   tie_word_embeddings=True)  # fmt: skip
    transformers.LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    file = next(tmp_path.glob("*.safetensors"))
    model = build_model(str(tmp_path), V, 0, d_model=0, n_layer=0, n_head=0, max_positions=0)
    frozen = model.model.norm.weight
    frozen.requires_grad_(False)
    if not all(_mapped_from(file, p) for p in model.parameters()):
        pytest.skip("this transformers reads the weights into memory: no mapping to leave")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    policy = Policy(model, torch.device("cpu"))
    assert policy.params and not any(_mapped_from(file, p) for p in policy.params)
    assert _mapped_from(file, frozen)
    for n, p in policy.model.named_parameters():
        assert torch.equal(p, before[n]), n
    assert policy.model.lm_head.weight is policy.model.model.embed_tokens.weight


# -- --dtype auto: bf16 where the device computes it natively ----------------------------------

PRETRAINED = "pkg.mod:factory"  # a config is only made here: the model is never loaded


def _native(monkeypatch, native: bool) -> None:
    monkeypatch.setattr(device, "native_bf16", lambda where: native)


@pytest.mark.parametrize(("native", "want"), [(True, "bfloat16"), (False, "float32")])
def test_auto_is_bf16_for_a_pretrained_model_only_where_the_device_has_it(
    monkeypatch, native, want
):
    """A pretrained model's default is ``auto``, kept so by the config and resolved where the
    run starts, on its device (the set-up's, ``lm.build.resolve``); the tiny model's stays
    float32 (bf16's casts outweigh its products there: docs/lm.md, *Sizes*)."""
    _native(monkeypatch, native)
    assert FinetuneConfig("repeat", model=PRETRAINED).dtype == "auto"  # not this machine's
    assert FinetuneConfig("repeat", dtype="auto").dtype == "auto"
    assert FinetuneConfig("repeat").dtype == "float32"
    assert device.resolved_dtype("auto", "cpu") == want  # the set-up's, on the run's device
    with device.precision("auto", torch.device("cpu")):  # precision reads auto the same way
        assert torch.is_autocast_enabled("cpu") == native


def test_a_dtype_given_wins_over_the_hardware(monkeypatch):
    from eligibility.lm.policy import Policy

    tiny = TinyLM(V, d_model=8, n_head=2, n_layer=1)
    for native, given in ((True, "float32"), (False, "bfloat16")):
        _native(monkeypatch, native)
        assert FinetuneConfig("repeat", model=PRETRAINED, dtype=given).dtype == given
        assert Policy(tiny, torch.device("cpu"), given).dtype == given


def test_native_bf16_reads_torchs_cpu_features(monkeypatch):
    """AVX-512 BF16 or AMX BF16 in ``torch.cpu.get_capabilities()``: native; neither: not."""
    cpu = torch.device("cpu")
    for caps, want in (
        ({"avx512_bf16": True, "amx_bf16": False}, True),
        ({"avx512_bf16": False, "amx_bf16": True}, True),
        ({"avx512_bf16": False, "amx_bf16": False, "avx2": True}, False),
        ({"architecture": "arm64"}, False),
    ):
        monkeypatch.setattr(torch.cpu, "get_capabilities", lambda caps=caps: caps)
        assert device.native_bf16(cpu) is want, caps
    assert device.native_bf16(torch.device("meta")) is False


def test_a_kept_weight_is_column_major_for_a_decode_steps_float32_products_on_the_cpu():
    """``product_layout``: for a decode step's few rows a float32 CPU weight becomes
    column-major (``W.t()`` contiguous, the layout sgemm multiplies by untransposed), equal to W
    entry by entry, and ``F.linear`` through it equals ``x Wᵀ`` in float64 to float32's
    rounding; for more rows, a bf16 weight or a float64 one it is returned as it is, and a
    column-major one stays itself."""
    from torch.nn import functional as F

    from eligibility.torch.hardware import FEW_ROWS, product_layout

    g = torch.Generator().manual_seed(0)
    w = torch.randn(96, 40, generator=g)
    kept = product_layout(w, FEW_ROWS)
    assert kept.shape == w.shape and kept.stride() == (1, 96) and kept.t().is_contiguous()
    assert torch.equal(kept, w) and kept.data_ptr() != w.data_ptr()
    assert product_layout(kept, 1) is kept
    for rows in (1, 4, 16, FEW_ROWS):
        x = torch.randn(rows, 40, generator=g)
        exact = x.double() @ w.double().t()
        assert torch.allclose(F.linear(x, kept).double(), exact, rtol=1e-5, atol=1e-5)
    assert product_layout(w, FEW_ROWS + 1) is w
    for other in (w.bfloat16(), w.double()):
        assert product_layout(other, 1) is other


def test_the_chosen_dtype_is_saved_and_a_resume_elsewhere_keeps_it(monkeypatch, tmp_path):
    """config.json holds the dtype ``auto`` resolved to where the run started; read back where
    the hardware has no bf16 (a resume on another machine), even with ``--dtype auto`` given
    again, the run stays bfloat16."""
    from eligibility.lm.config import IDENTITY, INFINITE
    from eligibility.runs import load_config, resumed

    _native(monkeypatch, True)
    run = tmp_path / "run"
    made = FinetuneConfig("repeat", dtype="auto", out=str(run), **TINY_RUN)
    finetune(made)
    assert json.loads((run / "config.json").read_text())["dtype"] == "bfloat16"
    _native(monkeypatch, False)
    saved = load_config(run, FinetuneConfig)
    assert saved.dtype == "bfloat16"
    again = FinetuneConfig("repeat", dtype="auto", max_updates=2, **TINY_SIZE).given()
    assert resumed(saved, again, IDENTITY, INFINITE).dtype == "bfloat16"
    with pytest.raises(ValueError, match="--dtype 'float32'"):  # a concrete other one: refused
        resumed(saved, {"dtype": "float32"}, IDENTITY, INFINITE)


TINY_SIZE = dict(group_size=2, prompts_per_batch=1, d_model=8, n_head=2, n_layer=1)
TINY_RUN = dict(max_updates=1, eval_every=0, target_accuracy=None, progress=False, **TINY_SIZE)


def test_cli_dtype_auto_runs_and_saves_the_choice_a_bad_value_is_one_line_exit_2(
    monkeypatch, tmp_path, capsys
):
    from eligibility.cli import build_parser, main

    _native(monkeypatch, True)
    out = tmp_path / "run"
    argv = ["finetune", "repeat", "--dtype", "auto", "--max-updates", "1", "--eval-every", "0",
            "--group-size", "2", "--prompts-per-batch", "1", "--d-model", "8", "--n-head", "2",
            "--n-layer", "1", "--target-accuracy", "none", "--no-progress",
            "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:
        main(["finetune", "repeat", "--dtype", "fp16"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and "--dtype" in err, err
    # TRL's --bf16 false is float32, whatever the hardware has
    args = build_parser().parse_args(["finetune", "repeat", "--bf16", "false"])
    assert args.dtype == "float32"


# -- on CUDA -----------------------------------------------------------------------------------


@torch.no_grad()
def _plain_loop(model, prompt, t_max, u):
    """One prompt, no cache, no padding, the given uniforms: tokens and log-probs."""
    ids, lps = list(prompt), []
    for k in range(t_max):
        z = model(input_ids=torch.tensor([ids], device="cuda")).logits[0, -1, :V].double()
        p = torch.softmax(z, -1).cpu().numpy()
        tok = int(min(np.searchsorted(np.cumsum(p), u[k] * p.sum(), side="right"), V - 1))
        ids.append(tok)
        lps.append(float(torch.log_softmax(z, -1)[tok]))
        if tok == 0:
            break
    return ids[len(prompt) :], lps


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_sampler_equals_the_plain_loop_and_the_trainers_logps(dtype):
    """The sampler on CUDA: the tokens a plain loop draws with the same uniforms, and the
    log-probs the trainer recomputes (bf16: within the rounding of two different passes)."""
    torch.manual_seed(0)
    model = TinyLM(V, d_model=16, n_layer=2, n_head=2, max_positions=24).eval().cuda()
    prompts = [[1, 3], [1, 4, 5, 6], [1, 7, 8]]
    with device.precision(dtype, torch.device("cuda")):
        batch = sample(model, prompts, vocab_size=V, max_new_tokens=6,
                       rng=np.random.default_rng(1))  # fmt: skip
        again = token_logps(model, batch, vocab_size=V)
    assert batch.completion_ids.device.type == "cuda" and again.device.type == "cuda"
    m = batch.completion_mask.bool()
    if dtype == "float32":
        u = np.random.default_rng(1).random((6, 3))
        for i, p in enumerate(prompts):
            toks, lps = _plain_loop(model, p, 6, u[:, i])
            n = int(batch.lengths[i])
            assert batch.completion_ids[i, :n].tolist() == toks
            assert float((batch.logps[i, :n].cpu() - torch.tensor(lps)).abs().max()) < 1e-4
        assert float((again - batch.logps)[m].abs().max()) < 1e-4
    else:  # bf16: the two passes round differently; their ratio stays near 1
        assert float((again - batch.logps)[m].abs().max()) < 0.1


def _loss_on_cuda(model, batch):
    """finetune's loss with the lab model's weights on CUDA, the gradient flowing back."""
    from eligibility.lm.sample import Completions

    weights = {k: v.cuda() for k, v in model.named_parameters()}
    mask = batch.completion_mask.long().cuda()
    prompts = batch.prompt_ids.cuda()
    completions = Completions(
        prompt_ids=prompts, prompt_mask=torch.ones_like(prompts),
        completion_ids=batch.completion_ids.cuda(), completion_mask=mask,
        logps=batch.old_logps.cuda(), ended=torch.ones(len(mask), dtype=torch.bool).cuda(),
    )  # fmt: skip
    logps = token_logps(_OnCuda(model, weights), completions, vocab_size=model.vocab_size)
    ref = batch.ref_logps[:, : mask.shape[1]].cuda()
    value, _ = loss(logps, batch.rewards.cuda(), mask.bool(), group_size=batch.group_size,
                    baseline="rloo", scale="none", aggregation="sequence-sum",
                    max_completion_length=batch.max_completion_length, kl="reward-to-go",
                    beta=batch.beta, ref_logps=ref)  # fmt: skip
    return value.cpu()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_cuda_update_is_unbiased_on_the_exact_problem():
    """finetune's loss computed on CUDA, held by the check against the exact ∇J of the ``kl``
    problem. The check runs in a fresh process, as from the command line: the user's loss runs
    in a worker forked from the check, and a fork cannot start CUDA where its parent had
    (this test process has, in the tests before)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import json; from eligibility.check import check; "
        "from test_lm_device import _loss_on_cuda as fn; "
        "(p,) = check(fn, sequence=True, form='model', problem='kl', samples=30).problems; "
        "print(json.dumps([p.verdict, p.diagnosis, str(p.error or '')]))"
    )
    here = Path(__file__).resolve().parent
    path = os.pathsep.join([str(here.parent / "src"), str(here), os.environ.get("PYTHONPATH", "")])
    # torch.cuda.is_available() (this module's skipif, at its import there) asks the driver for
    # its devices unless told to ask NVML: that alone would refuse CUDA to every later fork
    env = {**os.environ, "PYTHONPATH": path, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdict, diagnosis, error = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (verdict, diagnosis) == ("unbiased", None), error


class _OnCuda(torch.nn.Module):
    def __init__(self, model, weights):
        super().__init__()
        self.__dict__["inner"], self.weights = model, weights

    def forward(self, **kw):
        return torch.func.functional_call(self.inner, self.weights, (), kw)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
@pytest.mark.parametrize("second", ["cuda", "cpu"])
def test_a_cuda_run_resumes_on_either_device(tmp_path, second):
    """2 updates on CUDA, checkpointed (through the host), then 2 more on ``second``: the
    weights end where 4 straight CUDA updates end, to float32 rounding across kernels."""
    straight = finetune(FinetuneConfig(**dict(KW, max_updates=4), device="cuda"))
    out = tmp_path / "run"
    first = finetune(FinetuneConfig(**KW, device="cuda", checkpoint_every=1, out=str(out)))
    assert next(first.model.parameters()).device.type == "cuda"
    resumed = finetune(FinetuneConfig(**dict(KW, max_updates=4), device=second), resume=out)
    assert next(resumed.model.parameters()).device.type == second
    after = resumed.model.state_dict()
    for k, v in straight.model.state_dict().items():
        torch.testing.assert_close(after[k].cpu(), v.cpu(), rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_a_cuda_runs_group_carries_cpu_and_cuda_collectives_and_ddp_and_fsdp():
    """The group a CUDA run forms (``cpu:gloo,cuda:nccl``), as one rank on this GPU: a CPU
    tensor's collective and a CUDA one's both run, ``Ranks``' collectives land on the GPU,
    and DDP's summed gradient and FSDP2's sharded one equal the plain backward's. A group on
    NCCL alone refuses a CPU tensor, said as the backend's refusal, not as a lost rank."""
    import socket

    import torch.distributed as dist

    from eligibility.lm.edge import ranks as lm_ranks

    def group(backend):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0,
                                world_size=1)  # fmt: skip

    torch.cuda.set_device(0)
    home = torch.device("cuda", 0)
    group(lm_ranks.backend("cuda"))
    try:
        cpu = torch.tensor([3.0])
        dist.all_reduce(cpu)  # gloo's
        r = lm_ranks.Ranks(0, 1, 0, home)
        (sent,) = r._call("a test", "all_reduce", torch.tensor([5]), op=dist.ReduceOp.MAX)
        assert sent.device == home and int(sent) == 5
        torch.manual_seed(0)
        model = TinyLM(V, d_model=16, n_layer=2, n_head=2, max_positions=24).cuda()
        ids = torch.randint(0, V, (3, 7), device=home)

        def grads(call):
            model.zero_grad(set_to_none=True)
            call(ids).logits.float().square().mean().backward()
            return torch.cat([p.grad.flatten() for p in model.parameters()])

        plain = grads(lambda x: model(input_ids=x))
        ddp = lm_ranks.replicate(model)
        ddp.module.run = lambda x: model(input_ids=x)  # the pass DDP wraps (Policy's way)
        torch.testing.assert_close(grads(ddp), plain, rtol=1e-5, atol=1e-7)
        twin = TinyLM(V, d_model=16, n_layer=2, n_head=2, max_positions=24).cuda()
        twin.load_state_dict(model.state_dict())
        sharded = lm_ranks.shard(twin, 1)
        sharded.zero_grad(set_to_none=True)
        sharded(input_ids=ids).logits.float().square().mean().backward()
        got = torch.cat([p.grad.full_tensor().flatten() for p in sharded.parameters()])
        torch.testing.assert_close(got, plain, rtol=1e-5, atol=1e-7)
    finally:
        dist.destroy_process_group()
    group("nccl")
    try:
        alone = lm_ranks.Ranks(0, 1, 0, torch.device("cpu"))
        with pytest.raises(lm_ranks.BackendError, match="refused"):
            alone._call("a test", "all_reduce", torch.tensor([1.0]))
    finally:
        dist.destroy_process_group()


def test_a_local_rank_of_several_on_cuda_runs_on_its_own_device_from_the_start(monkeypatch):
    """Local rank 1 of 2 resolves ``--device cuda`` to cuda:1, as its ranks' home.

    Before any rank joins the group: the model is loaded and measured there, not on cuda:0.
    """
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    made = []
    monkeypatch.setattr(torch.cuda, "set_device", made.append)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)  # joins no group
    env = {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}  # fmt: skip
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert device.resolve("cuda") == device.resolve("auto") == torch.device("cuda", 1)
    assert made and set(made) == {1}  # CUDA's current device: the streams torch makes there
    assert Ranks.from_env("cuda").device == torch.device("cuda", 1)  # the ranks agree
    assert device.resolve("cpu") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(ValueError, match="LOCAL_RANK=1: torch sees 1 CUDA device"):
        device.resolve("cuda")
    for k in env:  # one process: CUDA's device as torch picks it, unchanged
        monkeypatch.delenv(k)
    assert device.resolve("cuda") == torch.device("cuda")
