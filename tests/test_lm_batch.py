"""A batch owns its rows (``lm.batch``): select, move and gather, one walk over its fields.

Truth: a field-by-field reference written here, plain indexing and ``torch.cat``, with its own
table of how each field pads. Each batch is built from its dataclass's fields
(``dataclasses.fields``), every field given values no other field has: a field that a batch
adds later and an operation leaves out fails here (its rows would come back unselected,
unmoved or one rank's), and so does a field the table below has not been told about.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from eligibility.lm.batch import Completions  # noqa: E402
from eligibility.lm.edge.ranks import Ranks  # noqa: E402
from eligibility.lm.episodes import Episodes  # noqa: E402
from eligibility.lm.rows import Rows  # noqa: E402

EOS = 7
PADS = {  # how each row field pads where blocks meet: (fill, on the left), stated apart
    "prompt_ids": (EOS, True),
    "prompt_mask": (0, True),
    "completion_ids": (EOS, False),
    "completion_mask": (0, False),
    "logps": (0, False),
    "ended": (False, False),
    "raw_logps": (0, False),
    "kept_sizes": (0, False),
    "turn": (-1, False),
    "turn_rewards": (0, False),
    "turns": (0, False),
    "tool_calls": (0, False),
    "tool_failures": (0, False),
    "cut": (False, False),
    "reward_parts": (0, False),
    "success": (0, False),
}
# the whole batch's settings, kept as they are
SETTINGS = {
    "max_turns": 3,
    "weighting": "outcome",
    "reward_names": ("a", "b"),
    "logged": {"judged": [1.0, 0.5]},
    "extra": ({"note": "a"}, {"note": "b"}),  # the batch as played (an evaluation's)
    "shown": ({"system": "s", "prompt": [], "completion": []}, None),  # so too
}
KINDS = (Completions, Episodes)


def _filled(kind: type, n: int, width: int, start: int) -> Completions:
    """A batch of ``kind``: n rows, every tensor field's values its own (from ``start`` on)."""
    values = {}
    for i, f in enumerate(dataclasses.fields(kind)):
        if f.name == "prefix":
            continue
        if f.name in SETTINGS:
            values[f.name] = SETTINGS[f.name]
            continue
        assert f.name in PADS, f"say how {kind.__name__}.{f.name} pads in PADS"
        base = start + 1000 * i
        one = ("ended", "turns", "tool_calls", "tool_failures", "cut", "success")
        shape = (n,) if f.name in one else (n, width)
        x = torch.arange(base, base + torch.Size(shape).numel()).reshape(shape)
        if f.name in ("ended", "cut"):
            x = x % 2 == (1 if f.name == "ended" else 0)
        elif f.name in ("logps", "raw_logps", "turn_rewards", "reward_parts", "success"):
            x = x.double() + 0.5
        values[f.name] = x
    return kind(**values)


def _tensors(batch: Completions) -> dict[str, torch.Tensor]:
    return {n: getattr(batch, n) for n in PADS if hasattr(batch, n)}


def _same(got: Completions, want: dict[str, torch.Tensor], kind: type) -> None:
    assert type(got) is kind
    for name, x in want.items():
        y = getattr(got, name)
        assert y.dtype == x.dtype and torch.equal(y, x), name
    for name, value in SETTINGS.items():
        if hasattr(got, name):
            assert getattr(got, name) == value, name


def _padded(x: torch.Tensor, width: int, fill: object, left: bool) -> torch.Tensor:
    if x.dim() == 1 or x.shape[1] == width:
        return x
    rows = [
        [fill] * (width - len(r)) + r if left else r + [fill] * (width - len(r)) for r in x.tolist()
    ]
    return torch.tensor(rows, dtype=x.dtype)


@pytest.mark.parametrize("kind", KINDS)
def test_every_field_is_set_and_its_values_are_its_own(kind):
    """The premise of the tests below: each field of the batch built is set (but ``prefix``,
    set where a test needs it), and no two share a value (``ended`` and ``cut``, bools, aside;
    each is ``True`` on other rows than the other)."""
    batch = _filled(kind, 3, 4, 0)
    tensors = _tensors(batch)
    settings = [s for s in SETTINGS if hasattr(batch, s)]
    assert len(tensors) + len(settings) + 1 == len(dataclasses.fields(kind))
    bools = ("ended", "cut")
    seen = [set(x.tolist()) for n, x in tensors.items() if n not in bools for x in [x.flatten()]]
    assert all(a.isdisjoint(b) for i, a in enumerate(seen) for b in seen[i + 1 :])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("index", [slice(1, 3), torch.tensor([2, 0, 2])])
def test_select_takes_the_rows_of_every_field(kind, index):
    batch = _filled(kind, 3, 4, 0)
    batch.prefix = (torch.tensor([0]), torch.zeros(3, dtype=torch.long))
    got = batch.select(index)
    _same(got, {n: x[index] for n, x in _tensors(batch).items()}, kind)
    assert got.prefix is None  # rows changed: found again from the ids


@pytest.mark.parametrize("kind", KINDS)
def test_to_moves_every_field(kind):
    batch = _filled(kind, 3, 4, 0)
    batch.prefix = (torch.tensor([0]), torch.zeros(3, dtype=torch.long))
    got = batch.to(torch.device("meta"))
    for name, x in _tensors(batch).items():
        y = getattr(got, name)
        assert y.device.type == "meta" and y.shape == x.shape and y.dtype == x.dtype, name
    assert {t.device.type for t in got.prefix} == {"meta"}
    assert all(getattr(got, s) == v for s, v in SETTINGS.items() if hasattr(got, s))


class _TwoThreads:
    """``torch.distributed``'s all_reduce (max) and all_gather between two threads: a world of
    two ranks in this process (each thread says its rank)."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2, timeout=30)
        self.box: list[torch.Tensor | None] = [None, None]
        self.local = threading.local()

    def _both(self, x: torch.Tensor) -> list[torch.Tensor]:
        self.box[self.local.rank] = x.clone()
        self.barrier.wait()
        both = list(self.box)
        self.barrier.wait()
        return both

    def all_reduce(self, t: torch.Tensor, op: object = None) -> None:
        t.copy_(torch.maximum(*self._both(t)))

    def all_gather(self, parts: list[torch.Tensor], t: torch.Tensor) -> None:
        for p, x in zip(parts, self._both(t), strict=True):
            p.copy_(x)


@pytest.mark.parametrize("kind", KINDS)
def test_the_whole_batch_gathers_every_field_of_two_ranks_blocks(kind, monkeypatch):
    """Rank 0 holds 3 rows of width 4, rank 1 2 rows of width 2: every rank gets the 5 rows,
    each field padded to the widest as it pads (the prompts on the left)."""
    fake = _TwoThreads()
    for name in ("all_reduce", "all_gather"):
        monkeypatch.setattr(dist, name, getattr(fake, name))
    blocks = [_filled(kind, 3, 4, 0), _filled(kind, 2, 2, 500)]
    got: list[Completions | None] = [None, None]

    def rank(r: int) -> None:
        fake.local.rank = r
        got[r] = Rows(Ranks(r, 2)).batch(blocks[r], 5, EOS)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = {}
    for name in _tensors(blocks[0]):
        fill, left = PADS[name]
        a, b = getattr(blocks[0], name), getattr(blocks[1], name)
        widest = max(x.shape[1] if x.dim() > 1 else 0 for x in (a, b))
        want[name] = torch.cat([_padded(x, widest, fill, left) for x in (a, b)])
    for whole in got:
        _same(whole, want, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_one_process_has_the_whole_batch_already(kind):
    batch = _filled(kind, 3, 4, 0)
    assert Rows().batch(batch, 3, EOS) is batch
