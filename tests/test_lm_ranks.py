"""`finetune` across ranks (torchrun, gloo on loopback): the same run on 1 or 2 ranks.

Truth: the single-process run. In float64 (the tiny model cast), 2 ranks reach the 1-rank
run's weights after 3 updates to 1e-10 for every row of the option table; through the command
line in float32, the first update's metrics are the 1-rank run's and later ones agree to the
order of the sums. The multi-process tests are slow (each launches torchrun); the partition
and the draws keyed by row are fast.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from eligibility.lm.edge.model import TinyLM  # noqa: E402
from eligibility.lm.edge.ranks import Ranks  # noqa: E402
from eligibility.lm.metrics import SCHEMA  # noqa: E402
from eligibility.lm.rows import Rows, shares  # noqa: E402
from eligibility.lm.sample import sample  # noqa: E402

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent
PATH = os.pathsep.join([str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])])
ENV = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "PYTHONPATH": PATH}


@pytest.mark.parametrize("n,world", [(12, 2), (9, 2), (7, 3), (2, 2), (5, 1)])
def test_the_rows_are_shared_whole_in_order_and_within_one(n, world):
    parts = shares(n, world)
    assert [i for s in parts for i in range(n)[s]] == list(range(n))
    sizes = [s.stop - s.start for s in parts]
    assert max(sizes) - min(sizes) <= 1


def test_one_process_is_a_rank_of_one_that_changes_nothing():
    ranks, rows = Ranks(), Rows()
    x = torch.arange(6.0).view(3, 2)
    assert rows.own(3) == slice(0, 3) and rows.gather(x, 3) is x
    assert ranks.objects(5) == [5] and ranks.largest(4) == 4 and ranks.broadcast("a") == "a"


def test_a_sharded_model_holds_its_shards_again_after_a_forward_without_gradient(tmp_path):
    """The root's own weights (embeddings, head) are resharded after every forward: the
    optimiser, built after the first one (a sampling, say), steps the shards,
    not an all-gathered copy that the next gather overwrites."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from eligibility.lm.edge.ranks import shard

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'g'}", rank=0, world_size=1)
    try:
        model = shard(TinyLM(9, d_model=8, n_layer=1, n_head=2, max_positions=8), 1)
        with torch.no_grad():
            model(torch.tensor([[1, 2, 3]]))
        assert all(isinstance(p, DTensor) for p in model.parameters())
    finally:
        dist.destroy_process_group()


def test_a_forward_shows_fsdp_its_output_tensors_so_a_sharded_root_is_gathered_for_backward():
    """FSDP2 hooks the root's gather for the backward on the tensors its pytree finds in the
    forward's output; an output type it cannot open (a plain dataclass) hid the logits, and
    torch 2.11's backward then read the root's freed weights. Both built-in models' outputs
    open to the logits and the cache, and a sharded backward equals the plain one."""
    import torch.distributed as dist
    from torch.utils._pytree import tree_leaves

    from eligibility.lm.edge.ranks import shard

    model = TinyLM(9, d_model=16, n_layer=2, n_head=2, max_positions=24)
    ids = torch.randint(0, 9, (3, 7), generator=torch.Generator().manual_seed(0))
    out = model(input_ids=ids, use_cache=True)
    leaves = tree_leaves(out)
    assert any(t is out.logits for t in leaves) and len(leaves) == 1 + 2 * 2
    model(input_ids=ids).logits.square().mean().backward()
    plain = torch.cat([p.grad.flatten() for p in model.parameters()])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        twin = TinyLM(9, d_model=16, n_layer=2, n_head=2, max_positions=24)
        twin.load_state_dict(model.state_dict())
        sharded = shard(twin, 1)
        with torch.no_grad():
            sharded(input_ids=ids)  # a probe: the root resharded after it
        sharded(input_ids=ids).logits.square().mean().backward()
        got = torch.cat([p.grad.full_tensor().flatten() for p in sharded.parameters()])
        torch.testing.assert_close(got, plain, rtol=1e-5, atol=1e-7)
    finally:
        dist.destroy_process_group()


def test_a_checkpoint_drops_the_shard_directories_it_does_not_name(tmp_path):
    """After each checkpoint rank 0 removes the shard slots the file on disk does not name (a
    temporary one too); resumed without --fsdp, the whole checkpoint names none: all go."""
    from eligibility.lm.checkpointer import Checkpointer
    from eligibility.lm.learner import Learner
    from eligibility.lm.policy import Policy
    from eligibility.runs import RunDir

    model = TinyLM(5, d_model=4, n_layer=1, n_head=1, max_positions=4)
    state = Checkpointer(Learner(Policy(model), 1e-3), tmp_path)
    named, left = tmp_path / "checkpoint.shards-0", tmp_path / ".checkpoint.shards-1.tmp"
    named.mkdir(), left.mkdir()

    class Files:  # the run layer's writer, as RunDir.checkpoint writes the file
        def checkpoint(self, tensors, snapshot):
            save_file(tensors, tmp_path / "checkpoint.safetensors")

    from safetensors.torch import save_file

    save_file({"shards": torch.tensor([0])}, tmp_path / "checkpoint.safetensors")
    state._drop_stale()  # the checkpoint names shards-0: kept, the other slot's temporary not
    assert named.exists() and not left.exists()
    files: RunDir = Files()  # type: ignore[assignment]
    assert state.save(files, {"counters": {"updates": 1}, "rngs": []})
    assert not named.exists() and not list(tmp_path.glob("*shards*"))


def test_the_memory_estimate_divides_what_is_sharded_and_adds_what_is_gathered(monkeypatch):
    """Per rank under --fsdp: 4 · (c · |θ| / W + k · γ) bytes of weights, by hand."""
    from eligibility.lm import limits
    from eligibility.lm.edge import loaders

    dims = loaders.Dims(d_model=8, n_layer=2, n_head=2, vocab=9, params=1000)
    act = limits.update_bytes(1, 4, dims, copies=0)  # the activations alone
    assert limits.update_bytes(1, 4, dims, copies=5) == 4 * 5000 + act
    assert limits.update_bytes(1, 4, dims, shards=2, held=300) == 4 * (2500 + 600) + act
    assert limits.update_bytes(1, 4, dims, shards=3, held=300) == 4 * (1667 + 600) + act
    lora = limits.sizes(lora=True, dtype="float32", shards=2)
    assert (lora["copies"], lora["whole"], lora["shards"]) == (1, 1, 2)
    # TinyLM(V=9, d=8, 2 layers, 8 positions): root = 9·8 + 8·8 + 2·8 + 9·8 = 224 (token and
    # position embeddings, final norm, head); a block = 12·8² + 13·8 = 872
    model = TinyLM(9, d_model=8, n_layer=2, n_head=2, max_positions=8)
    dims = loaders.dims_of(model)
    assert (dims.root, dims.blocks) == (224, (872, 872))
    before = loaders.Dims.tiny(9, 8, d_model=8, n_layer=2, n_head=2)  # before it is built
    assert before.blocks == dims.blocks and before.params <= dims.params  # a floor
    assert limits.held_whole(224, [872, 872]) == 224 + 2 * 872
    assert sum(p.numel() for p in model.parameters()) == 1968
    needs: list[int] = []
    monkeypatch.setattr(limits, "check_fits", lambda need, what: needs.append(need))
    for shards in (1, 4):
        sizes = limits.sizes(lora=False, dtype="float32", shards=shards)
        limits.check(dims, 4, 1, "x", **sizes)
    # the same activations; weights 4 · 5 · 1968 whole, 4 · (⌈5 · 1968 / 4⌉ + 2 · 1968) sharded
    assert needs[0] - needs[1] == 4 * 5 * 1968 - 4 * (2460 + 2 * 1968)


def _launched(world: int, rank: int = 0) -> dict[str, str]:
    """The environment torchrun gives rank ``rank`` of ``world``."""
    at = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "LOCAL_RANK": str(rank)}
    return {"WORLD_SIZE": str(world), "RANK": str(rank), **at}


def test_a_rank_is_estimated_to_score_its_share_of_the_batch(monkeypatch):
    """N = 12 rows on W = 5 ranks: a rank scores ⌈12 / 5⌉ = 3 at once (M = 2 caps it)."""
    from eligibility.lm import FinetuneConfig
    from eligibility.lm.build import _Shape

    shape = _Shape(t_max=4, longest=3)
    config = FinetuneConfig("repeat", group_size=4, prompts_per_batch=3)
    for world, micro, want in ((1, None, 12), (5, None, 3), (5, 2, 2)):
        for k, v in _launched(world).items():
            monkeypatch.setenv(k, v)
        at_once, what, _ = shape.update(config.with_changes(micro_batch_size=micro))
        assert at_once == want and (f"over {world} ranks" in what) == (world > 1), what


def test_a_rows_tokens_do_not_depend_on_which_rank_samples_it():
    """Two shares of a batch, each sampled alone with the whole batch's draws, give the
    whole batch's tokens and log-probs (the uniforms are the batch's, keyed by row)."""
    torch.manual_seed(0)
    model = TinyLM(9, d_model=16, n_layer=1, n_head=2, max_positions=16).double().eval()
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 2], [3, 3]] * 2
    kw = dict(vocab_size=9, max_new_tokens=6, eos_id=0)
    whole = sample(model, prompts, rng=np.random.default_rng(7), **kw)
    width, rng = max(len(p) for p in prompts), np.random.default_rng(7)
    halves = []
    for s in shares(len(prompts), 2):
        state = rng.bit_generator.state  # each rank starts from the same generator
        halves.append(sample(model, prompts[s], rng=rng, share=(s, len(prompts), width), **kw))
        rng.bit_generator.state = state
    for s, half in zip(shares(len(prompts), 2), halves, strict=True):
        t = half.completion_ids.shape[1]
        assert torch.equal(half.completion_ids, whole.completion_ids[s, :t])
        assert torch.allclose(half.logps, whole.logps[s, :t], rtol=0, atol=1e-12)
        assert torch.equal(half.prompt_ids, whole.prompt_ids[s])
    # not vacuous: a share drawing its own n uniforms (no share=) samples other tokens
    alone = sample(model, prompts[4:], rng=np.random.default_rng(7), **kw)
    assert not torch.equal(
        alone.completion_ids, whole.completion_ids[4:, : alone.completion_ids.shape[1]]
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(
    *args: str, nproc: int = 2, timeout: float = 300, **kw
) -> subprocess.CompletedProcess:
    cmd = [str(BIN / "torchrun"), "--standalone", f"--nproc-per-node={nproc}", *args]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=timeout, **kw)


def one_and_two(tmp_path: Path, worker: str) -> tuple[Path, Path]:
    """``worker`` (a script of tests/) run in one process, then on 2 ranks: its two folders."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir(), two.mkdir()
    script = str(HERE / worker)
    done = subprocess.run([sys.executable, script, str(one)], env=ENV, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    done = _torchrun(script, str(two))
    assert done.returncode == 0, done.stderr[-2000:]
    return one, two


@pytest.mark.slow
def test_two_ranks_reach_one_ranks_weights_for_every_option_row_in_float64(tmp_path):
    one, two = one_and_two(tmp_path, "ranks_worker.py")
    names = sorted(p.name for p in one.iterdir())
    assert names == sorted(p.name for p in two.iterdir()) and len(names) >= 59
    for name in names:
        a, b = torch.load(one / name), torch.load(two / name)
        # every row, data-parallel and sharded, the tiny model and the Llama (its norms kept
        # in float64: ranks_worker._norm), full and LoRA: to 1e-10 (4e-15 measured)
        tol = 1e-10
        for k, w in a["weights"].items():
            assert w.dtype == torch.float64
            assert float((w - b["weights"][k]).abs().max()) <= tol, (name, k)
        for ra, rb in zip(a["history"], b["history"], strict=True):
            assert ra["tokens"] == rb["tokens"] and ra["mean_reward"] == rb["mean_reward"]
            assert abs(ra["loss"] - rb["loss"]) <= tol * max(1.0, abs(ra["loss"]))
        assert any(r["grad_norm"] > 1e-3 for r in a["history"]), name  # the runs did move


def _rows(run: Path) -> list[dict[str, str]]:
    with open(run / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _close(a: list[dict[str, str]], b: list[dict[str, str]], exact_first: bool = True) -> None:
    assert len(a) == len(b)
    skip = set(SCHEMA.timing)
    for i, (ra, rb) in enumerate(zip(a, b, strict=True)):
        for k in ra.keys() - skip:
            if i == 0 and exact_first and k in ("tokens", "mean_reward", "accuracy", "loss"):
                assert ra[k] == rb[k], (i, k)
            elif ra[k] and rb[k]:
                assert abs(float(ra[k]) - float(rb[k])) <= 1e-4 * max(1, abs(float(ra[k]))), (i, k)


FINETUNE = ["-m", "eligibility", "finetune", "reverse", "--max-updates", "6", "--eval-every",
            "3", "--no-progress", "--d-model", "32"]  # fmt: skip


@pytest.mark.slow
def test_torchrun_runs_one_run_whose_metrics_are_the_single_process_ones(tmp_path):
    single = subprocess.run([sys.executable, *FINETUNE, "--out", str(tmp_path / "one")],
                            env=ENV, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert single.returncode == 0, single.stderr[-2000:]
    two = _torchrun(*FINETUNE, "--out", str(tmp_path / "two"))
    assert two.returncode == 0, two.stderr[-2000:]
    assert two.stdout.count("reverse:") == 1  # rank 0 reports, once
    _close(_rows(tmp_path / "one"), _rows(tmp_path / "two"))


@pytest.mark.slow
def test_eval_on_start_on_two_ranks_is_the_single_process_start(tmp_path):
    """``--eval-on-start`` on 2 ranks: every rank evaluates (a collective, as ``--eval-every``'s
    is), rank 0 reports one start accuracy, the single process's; the rows are its rows."""
    argv = [*FINETUNE[:5], "3", *FINETUNE[6:], "--eval-on-start", "--format", "json"]
    single = subprocess.run([sys.executable, *argv, "--out", str(tmp_path / "one")],
                            env=ENV, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert single.returncode == 0, single.stderr[-2000:]
    two = _torchrun(*argv, "--out", str(tmp_path / "two"))
    assert two.returncode == 0, two.stderr[-2000:]
    start = [json.loads(out)["start_accuracy"] for out in (single.stdout, two.stdout)]
    assert start[0] is not None and start[0] == start[1]
    _close(_rows(tmp_path / "one"), _rows(tmp_path / "two"))


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags",
    [
        ["--top-p", "0.9"],  # KL none: each rank's rows of the scorer's ln π_τ and kept sets
        ["--top-k", "3", "--kl", "sequence-reward", "--beta", "0.05", "--micro-batch-size", "8"],
    ],
)
def test_truncated_sampling_on_two_ranks_is_the_single_process_run(tmp_path, flags):
    """The mismatch's columns (ln π_τ before the truncation, the tokens outside the kept set)
    are the batch's on every rank, as the log-probs are: the metrics are one process's."""
    argv = [*FINETUNE[:5], "3", *FINETUNE[6:], *flags]
    single = subprocess.run([sys.executable, *argv, "--out", str(tmp_path / "one")],
                            env=ENV, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert single.returncode == 0, single.stderr[-2000:]
    two = _torchrun(*argv, "--out", str(tmp_path / "two"))
    assert two.returncode == 0, two.stderr[-2000:]
    both = _rows(tmp_path / "two")
    _close(_rows(tmp_path / "one"), both)
    assert all(r["sampling/ratio/mean"] for r in both)  # the columns were filled


@pytest.mark.slow
def test_twenty_two_rank_runs_in_a_row_each_exit_0(tmp_path):
    """A finished run leaves the process group it formed: one never destroyed ends the
    process with gloo's threads running (``terminate called without an active exception``
    at exit, now and then: a scheduler reads the job as failed)."""
    argv = [*FINETUNE[:5], "1", "--eval-every", "1", "--no-progress", "--d-model", "16"]
    for i in range(20):
        done = _torchrun(*argv, "--out", str(tmp_path / f"run{i}"), timeout=240)
        assert done.returncode == 0 and "terminate called" not in done.stderr, (
            i, done.stderr[-2000:])  # fmt: skip


@pytest.mark.slow
def test_two_nodes_meet_at_a_c10d_rendezvous(tmp_path):
    port, procs = _free_port(), []
    for node in range(2):
        cmd = [str(BIN / "torchrun"), "--nnodes=2", "--nproc-per-node=1", f"--node-rank={node}",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=t",
               *FINETUNE, "--out", str(tmp_path / "two")]  # fmt: skip
        procs.append(subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read().decode()[-2000:]
    single = subprocess.run([sys.executable, *FINETUNE, "--out", str(tmp_path / "one")],
                            env=ENV, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert single.returncode == 0
    _close(_rows(tmp_path / "one"), _rows(tmp_path / "two"))


@pytest.mark.slow
@pytest.mark.parametrize("world", [1, 2])
def test_a_two_rank_run_resumes_on_any_number_of_ranks(tmp_path, world):
    full = _torchrun(*FINETUNE, "--out", str(tmp_path / "full"))
    assert full.returncode == 0, full.stderr[-2000:]
    half = [*FINETUNE[:5], "3", *FINETUNE[6:]]  # --max-updates 3, a checkpoint at 3
    first = _torchrun(*half, "--out", str(tmp_path / "cut"))
    assert first.returncode == 0, first.stderr[-2000:]
    rest = _torchrun(*FINETUNE, "--resume", str(tmp_path / "cut"), nproc=world)
    assert rest.returncode == 0, rest.stderr[-6000:]
    _close(_rows(tmp_path / "full"), _rows(tmp_path / "cut"), exact_first=False)


def _resumes_for_one_more_update(run: Path) -> None:
    """``--resume`` of a stopped 2-rank run goes on from its checkpoint for one more update."""
    done = len(_rows(run))
    resumed = _torchrun(*FINETUNE[:5], str(done + 1), *FINETUNE[6:], "--resume", str(run))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert len(_rows(run)) == done + 1


@pytest.mark.slow
def test_a_killed_rank_ends_the_job_in_bounded_time_with_a_resumable_run(tmp_path):
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node=2", *FINETUNE[:5], "200",
           *FINETUNE[6:], "--checkpoint-every", "1", "--out", str(tmp_path / "run")]  # fmt: skip
    env = {**ENV, "ELIGIBILITY_RANK_TIMEOUT": "20"}
    pipe = subprocess.PIPE
    job = subprocess.Popen(cmd, env=env, stdout=pipe, stderr=pipe, start_new_session=True)
    metrics = tmp_path / "run" / "metrics.csv"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
        metrics.exists() and len(_rows(tmp_path / "run")) >= 2
    ):
        time.sleep(0.2)
    kids = subprocess.run(
        ["pgrep", "-P", str(job.pid)], capture_output=True, text=True
    ).stdout.split()
    assert len(kids) == 2, kids
    t0 = time.monotonic()
    os.kill(int(kids[-1]), signal.SIGKILL)  # one rank, the last started
    job.wait(timeout=120)
    assert time.monotonic() - t0 < 60 and job.returncode != 0
    _resumes_for_one_more_update(tmp_path / "run")


@pytest.mark.slow
def test_sigint_to_the_launcher_stops_every_rank_after_the_update_with_a_checkpoint(tmp_path):
    cmd = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node=2", *FINETUNE[:5], "200",
           *FINETUNE[6:], "--out", str(tmp_path / "run")]  # fmt: skip
    job = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True)  # fmt: skip
    metrics = tmp_path / "run" / "metrics.csv"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
        metrics.exists() and len(_rows(tmp_path / "run")) >= 2
    ):
        time.sleep(0.2)
    os.killpg(job.pid, signal.SIGINT)  # the launcher's group, as a Ctrl-C sends it
    _, err = job.communicate(timeout=120)
    assert (tmp_path / "run" / "checkpoint.safetensors").exists(), err.decode()[-2000:]
    _resumes_for_one_more_update(tmp_path / "run")


@pytest.mark.slow
@pytest.mark.parametrize(
    "cut_sharded,world,sharded",
    [(True, 1, False), (True, 2, True), (True, 2, False), (False, 2, True)],
)
def test_a_run_resumes_sharded_or_not_on_any_number_of_ranks(tmp_path, cut_sharded, world, sharded):
    """--fsdp: each rank writes its shards (torch.distributed.checkpoint), the checkpoint file
    names their directory; any world size, sharded or not, resumes it to the uninterrupted
    metrics (the first update the single process's exactly), and a sharded run resumes an
    unsharded checkpoint. A half-written shard directory (a killed write) is not read."""
    single = subprocess.run([sys.executable, *FINETUNE, "--out", str(tmp_path / "one")],
                            env=ENV, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert single.returncode == 0, single.stderr[-2000:]
    half, cut = [*FINETUNE[:5], "3", *FINETUNE[6:]], tmp_path / "cut"
    first = _torchrun(*half, *(["--fsdp"] if cut_sharded else []), "--out", str(cut))
    assert first.returncode == 0, first.stderr[-3000:]
    if cut_sharded:
        from safetensors import safe_open

        with safe_open(str(cut / "checkpoint.safetensors"), framework="pt") as f:
            assert list(f.keys()) == ["shards"] and int(f.get_tensor("shards")[0]) == 0
        assert len(list((cut / "checkpoint.shards-0").glob("*.distcp"))) == 2
        for junk in (cut / ".checkpoint.shards-1.tmp", cut / "checkpoint.shards-1"):
            junk.mkdir()
            (junk / "__0_0.distcp").write_bytes(b"half")
    rest = _torchrun(*FINETUNE, *(["--fsdp"] if sharded else []), "--resume", str(cut),
                     nproc=world)  # fmt: skip
    assert rest.returncode == 0, rest.stderr[-3000:]
    _close(_rows(tmp_path / "one"), _rows(cut))
    if cut_sharded and sharded:  # written anew into the directory the checkpoint did not name
        assert (cut / "checkpoint.shards-1" / "__0_0.distcp").read_bytes() != b"half"
        assert not (cut / ".checkpoint.shards-1.tmp").exists()
    if cut_sharded and world == 1:  # one rank shards nothing: its checkpoint names no shards,
        # and none is left (two ranks keep the run's saved --fsdp, and shard)
        assert not list(cut.glob("*checkpoint.shards-*")), sorted(p.name for p in cut.iterdir())


@pytest.mark.slow
def test_a_sharded_transformers_run_exports_one_model(tmp_path):
    """--fsdp on a Llama: `export` reads the ranks' shards into one Hugging Face model, the
    weights the run itself saved (gathered) at its end."""
    transformers = pytest.importorskip("transformers")
    run, out = tmp_path / "run", tmp_path / "export"
    llama = ["--model", "ranks_worker:llama", "--fsdp", "--max-updates", "2", "--no-progress"]
    done = _torchrun("-m", "eligibility", "finetune", "reverse", *llama, "--out", str(run))
    assert done.returncode == 0, done.stderr[-3000:]
    assert list(run.glob("checkpoint.shards-*/*.distcp"))
    cmd = [sys.executable, "-m", "eligibility", "export", str(run), str(out)]
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    kept = transformers.AutoModelForCausalLM.from_pretrained(run / "model").state_dict()
    exported = transformers.AutoModelForCausalLM.from_pretrained(out).state_dict()
    assert kept.keys() == exported.keys()
    assert all(torch.equal(kept[k], exported[k]) for k in kept)


TWO = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
       "MASTER_PORT": "29500"}  # fmt: skip


@pytest.mark.parametrize(
    "env,flags,said",
    [
        ({"WORLD_SIZE": "two"}, [], "WORLD_SIZE='two'"),
        ({"WORLD_SIZE": "0"}, [], "WORLD_SIZE='0'"),
        ({"WORLD_SIZE": "2"}, [], "without a whole RANK"),
        ({"RANK": "1"}, [], "RANK=1 without WORLD_SIZE > 1"),  # ran alone, exit 0, no word
        ({"LOCAL_RANK": "abc"}, [], "LOCAL_RANK='abc'"),  # likewise
        ({**TWO, "RANK": "5"}, [], "RANK='5': the launcher sets a whole number in [0, 1]"),
        ({**TWO, "RANK": "2"}, [], "RANK='2'"),
        ({**TWO, "RANK": "-1"}, [], "RANK='-1'"),
        ({**TWO, "RANK": "one"}, [], "RANK='one'"),
        ({**TWO, "LOCAL_RANK": "2"}, [], "LOCAL_RANK='2'"),
        ({**TWO, "LOCAL_RANK": "0.5"}, [], "LOCAL_RANK='0.5'"),
        ({**TWO, "MASTER_ADDR": ""}, [], "without MASTER_ADDR"),
        ({**TWO, "MASTER_ADDR": "no.such.host.invalid"}, [], "names no host"),  # waited 300 s
        ({**TWO, "MASTER_PORT": "http"}, [], "MASTER_PORT='http'"),
        ({**TWO, "MASTER_PORT": "70000"}, [], "MASTER_PORT='70000'"),
        ({**TWO, "ELIGIBILITY_RANK_TIMEOUT": "soon"}, [], "ELIGIBILITY_RANK_TIMEOUT='soon'"),
        # 90: inf passed, and the process group's timedelta overflowed ("could not join")
        ({**TWO, "ELIGIBILITY_RANK_TIMEOUT": "inf"}, [], "ELIGIBILITY_RANK_TIMEOUT='inf'"),
        ({**TWO, "WORLD_SIZE": "3"}, ["--prompts-per-batch", "1", "--group-size", "2"],
         "cannot be shared by 3 ranks"),
        (TWO, ["--fsdp", "--prompts-per-batch", "1", "--group-size", "3"], "a multiple of 2"),
    ],
)  # fmt: skip
def test_a_bad_launch_is_one_line_exit_2_before_any_rank_waits(
    monkeypatch, capsys, tmp_path, env, flags, said
):
    """Refused before the process group is joined (no rank waits on another) and before the
    run directory is made."""
    from eligibility.cli import main

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = tmp_path / "run"
    argv = ["finetune", "repeat", "--max-updates", "1", "--no-progress", "--out", str(out)]
    assert main([*argv, *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and said in err[0] and "Traceback" not in err[0], err
    assert not out.exists()


@pytest.mark.slow
def test_a_sharded_run_the_guard_stops_is_checkpointed_by_every_rank_and_resumes(tmp_path):
    """A wreck under --fsdp (the tiny wreck of test_lm_guard, on 2 ranks): every rank stops at
    the same update and writes its shards of that update's checkpoint (rank 0 alone cannot:
    the save is collective), and the run resumes with another rate."""
    wreck = ["-m", "eligibility", "finetune", "repeat", "--lr", "0.3", "--max-kl", "0.05",
             "--d-model", "8", "--n-head", "2", "--n-layer", "1", "--group-size", "2",
             "--prompts-per-batch", "2", "--max-completion-length", "3", "--eval-every", "3",
             "--checkpoint-every", "100", "--target-accuracy", "0.95", "--no-progress",
             "--fsdp"]  # fmt: skip
    run = tmp_path / "run"
    done = _torchrun(*wreck, "--max-updates", "14", "--out", str(run), timeout=240)
    assert done.returncode != 0 and "--resume" in done.stderr, done.stderr[-2000:]  # torchrun: 1
    stopped = len(_rows(run))
    assert 3 <= stopped < 14, done.stderr[-2000:]
    from safetensors import safe_open

    with safe_open(str(run / "checkpoint.safetensors"), framework="pt") as f:
        counters = json.loads(f.metadata()["counters"])
    assert counters["updates"] == stopped  # the stop's own update, not an earlier one
    on = [*wreck[:4], "--lr", "1e-3", "--max-updates", str(stopped + 2), "--resume", str(run)]
    resumed = _torchrun(*on, "--no-progress", timeout=240)
    assert resumed.returncode in (0, 1), resumed.stderr[-2000:]  # 1: the target not reached
    assert len(_rows(run)) == stopped + 2
