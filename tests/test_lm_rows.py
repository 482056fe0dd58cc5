"""The data-parallel rows (``lm.rows``) and the collectives under them (``lm.edge.ranks``).

Truth: the partition's definition (every row once, in order, sizes within one); for the
collectives, what ``torch.distributed`` is handed, seen through a fake backend (no GPU here:
the group's device is ``meta``, which no CPU tensor is on by chance). The 2-rank runs against
1 process are in ``tests/test_lm_ranks.py``.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from eligibility.lm.edge import ranks as edge  # noqa: E402
from eligibility.lm.edge.ranks import BackendError, RankLost, Ranks  # noqa: E402
from eligibility.lm.rows import Rows, shares  # noqa: E402


class _Sent(Exception):
    """Raised by the fake backend once it has seen a collective's tensors."""


def _fake(monkeypatch, seen: list[tuple[str, str]], error: BaseException | None = None) -> None:
    def collective(name):
        def call(*args, **kw):
            for a in args:
                for t in a if isinstance(a, list) else [a]:
                    if isinstance(t, torch.Tensor):
                        seen.append((name, t.device.type))
            raise error or _Sent()

        return call

    for name in ("all_reduce", "all_gather", "broadcast"):
        monkeypatch.setattr(dist, name, collective(name))


def test_every_collective_puts_its_tensors_on_the_groups_device(monkeypatch):
    """CPU tensors (an integer agreed on, the rows, the weights) go to the group's
    device before the backend sees them: a NCCL group gets CUDA tensors only."""
    seen: list[tuple[str, str]] = []
    _fake(monkeypatch, seen)
    ranks = Ranks(0, 2, device=torch.device("meta"))
    p = torch.nn.Parameter(torch.ones(3))
    p.grad = torch.ones(3)
    calls = {
        "rows": lambda: ranks.rows(torch.ones(2, 3), [2, 2]),
        "largest": lambda: ranks.largest(3),
        "broadcast_tensors": lambda: ranks.broadcast_tensors([p]),
    }
    for name, call in calls.items():
        before = len(seen)
        with pytest.raises(_Sent):
            call()
        assert len(seen) > before, name
    assert {d for _, d in seen} == {"meta"}, seen


def test_a_cuda_run_joins_nccl_and_gloo_on_its_local_device(monkeypatch):
    """``cpu:gloo,cuda:nccl``: a CPU tensor's collective has a backend in a CUDA run."""
    joined = []
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kw: joined.append(backend))
    monkeypatch.setattr(torch.cuda, "set_device", lambda i: joined.append(i))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    env = {"WORLD_SIZE": "2", "RANK": "1", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": "29500"}  # fmt: skip
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    ranks = Ranks.from_env("cuda")
    assert joined == [1, "cpu:gloo,cuda:nccl"] and ranks.device == torch.device("cuda", 1)
    assert (ranks.rank, ranks.world, ranks.local) == (1, 2, 1)
    joined.clear()
    ranks = Ranks.from_env("cpu")
    assert joined == ["gloo"] and ranks.device == torch.device("cpu")
    assert edge.backend("cuda") == "cpu:gloo,cuda:nccl" and edge.backend("cpu") == "gloo"


@pytest.mark.parametrize(
    "said,kind",
    [
        ("No backend type associated with device type cpu", BackendError),
        ("Tensors must be CUDA and dense", BackendError),
        ("[gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:4711", RankLost),
        ("Timed out waiting 20000ms for send operation to complete", RankLost),
        ("NCCL communicator was aborted on rank 1", RankLost),
    ],
)
def test_a_backend_error_is_said_as_what_it_is_not_as_a_lost_rank(monkeypatch, said, kind):
    _fake(monkeypatch, [], RuntimeError(said))
    with pytest.raises(ValueError) as caught:
        Ranks(0, 2).largest(1)
    assert type(caught.value) is kind and said[:40] in str(caught.value)
    lost = "another rank stopped answering" in str(caught.value)
    assert lost == (kind is RankLost), str(caught.value)


def test_a_collective_run_by_torchs_machinery_is_said_as_ours_and_nothing_else_is():
    """DDP's all-reduce fails inside a backward: a lost peer there is a RankLost; the
    model's own error (not the group's) passes unchanged."""
    ranks = Ranks(0, 2)
    with pytest.raises(RankLost, match="the gradient's all-reduce"):
        with ranks.guarded("the gradient's all-reduce"):
            raise RuntimeError("[pair.cc:534] Connection closed by peer [127.0.0.1]:4711")
    with pytest.raises(BackendError):
        with ranks.guarded("x"):
            raise dist.DistBackendError("NCCL error: invalid usage")
    own = RuntimeError("mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)")
    with pytest.raises(RuntimeError) as caught:
        with ranks.guarded("x"):
            raise own
    assert caught.value is own


@pytest.mark.parametrize("n,world", [(12, 2), (9, 2), (7, 3), (2, 2), (5, 1)])
def test_each_rank_draws_its_block_with_the_whole_batchs_alignment(n, world):
    prompts = [[i % 5 + 1] * (1 + i % 3) for i in range(n)]
    seen = []
    for rank in range(world):
        mine, (rows, total, width) = Rows(Ranks(rank, world)).draws(prompts)
        assert rows == shares(n, world)[rank] and mine == prompts[rows]
        assert total == n and width == max(len(p) for p in prompts)
        seen += range(n)[rows]
    assert seen == list(range(n))


def test_the_evaluation_is_split_unless_the_ranks_run_in_lockstep():
    index = list(range(7))
    halves = [Rows(Ranks(r, 2)).evaluated(index) for r in range(2)]
    assert halves[0] + halves[1] == index and len(halves[0]) == 4
    assert Rows(Ranks(1, 2), lockstep=True).evaluated(index) == index
    parts = ([1], [2.0])
    assert Rows().joined(parts) is parts  # one process: its own lists


def test_fsdp_without_a_launcher_says_it_does_nothing(monkeypatch, capsys):
    from eligibility.lm import FinetuneConfig
    from eligibility.lm.build import task_and_policy

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    _, task, policy, _ = task_and_policy(FinetuneConfig("repeat", fsdp=True), measure=False)
    task.close()
    said = [line for line in capsys.readouterr().err.splitlines() if "--fsdp" in line]
    assert len(said) == 1 and "does nothing" in said[0] and not policy.sharded, said


def test_compile_decode_off_cuda_says_it_does_nothing(capsys):
    from eligibility.lm import FinetuneConfig
    from eligibility.lm.build import task_and_policy

    config = FinetuneConfig("repeat", compile_decode=True, device="cpu")
    _, task, policy, _ = task_and_policy(config, measure=False)
    task.close()
    said = [line for line in capsys.readouterr().err.splitlines() if "--compile-decode" in line]
    assert len(said) == 1 and "does nothing" in said[0] and policy.compile_decode, said


@pytest.mark.slow  # DDP's first construction imports torch._dynamo: seconds
def test_ddp_sums_the_gradient_while_the_backward_runs(monkeypatch):
    """The gradient pass as DDP runs it (a one-rank gloo group, in process): the comm hook's
    all-reduce (a sum, not DDP's mean) runs inside ``backward()``, and the gradient is
    autograd's; under ``no_sync`` nothing is sent and the next pass sends the sum of both."""
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2)).double()
        ddp = edge.replicate(model)
        sent: list[int] = []
        real = dist.all_reduce
        monkeypatch.setattr(
            dist, "all_reduce", lambda t, **kw: sent.append(t.numel()) or real(t, **kw)
        )
        ddp.module.run = lambda x: model(x).pow(2).sum()
        x = torch.randn(5, 4, dtype=torch.float64)
        with ddp.no_sync():
            ddp(x).backward()
        assert not sent
        ddp(2 * x).backward()
        assert sum(sent) == sum(p.numel() for p in model.parameters())
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        (model(x).pow(2).sum() + model(2 * x).pow(2).sum()).backward()
        for g, p in zip(got, model.parameters(), strict=True):
            torch.testing.assert_close(g, p.grad, rtol=0, atol=1e-12)
    finally:
        dist.destroy_process_group()
