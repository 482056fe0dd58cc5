r"""A token's credit, said once: what every kind of batch hands the one loss.

The policy-gradient theorem weighs each token's score by its credit,

    ∇J = E[Σₜ cₜ ∇ ln π(aₜ | hₜ)],   cₜ = A(G₍·,ₖ₍ₜ₎₎)ᵢ,   Gᵢ,ₖ = Σ_{j ≥ k} rᵢ,ⱼ,

the group advantage A (the option table's baseline and scale rows, taken column by column:
the samples of a prompt are a group) of the return from token t's turn k on (``reward-to-go``;
``outcome``: the whole return at every turn), and 0 on every token the model did not write. A
single completion is the case of one turn: its reward R is r₁, its tokens are turn 0. Each kind
of batch supplies a :class:`Credit` (its rewards per turn and each token's turn); the loss
(:mod:`eligibility.lm.objective`) multiplies, over the model's tokens packed to the left
(:func:`packed`: a completion's are already, an episode's lose the world's between them).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from eligibility.torch import group_advantages, kl_penalised_rewards

WEIGHTINGS = ("reward-to-go", "outcome")
"""How a turn's tokens are weighted: by the rewards from that turn on, or by the whole return."""


@dataclass(frozen=True)
class Credit:
    """A batch's rewards per turn and each token's turn: what its tokens' credit is made of.

    Attributes:
        turn_rewards: [N, K] rₖ of each row (a single completion: [N, 1], its reward).
        turn: [N, T] the turn of each token after the prompt (the world's tokens belong to the
            turn they answer), −1 on padding.
        weighting: one of :data:`WEIGHTINGS`.
        turns: K_max, the most turns a row may have (T_max of a constant normaliser is
            K_max times the reply limit: the most model tokens of a row).
    """

    turn_rewards: torch.Tensor
    turn: torch.Tensor
    weighting: str = "reward-to-go"
    turns: int = 1

    @classmethod
    def of_completions(cls, rewards: torch.Tensor, completion_mask: torch.Tensor) -> Credit:
        """A batch of single completions: one turn, its reward R, every completion token in it."""
        turn = torch.where(completion_mask > 0, 0, -1)
        return cls(rewards[:, None], turn)

    @property
    def returns_whole(self) -> torch.Tensor | None:
        """[N] each row's return where it credits every token of the row (K_max = 1), else None.

        With one turn every model token's credit is A(R)ᵢ of the row's return Rᵢ = r₁ (either
        weighting); with several, a token's is its own turn's.
        """
        return self.turn_rewards[:, 0] if self.turns == 1 else None


def returns(r: torch.Tensor, weighting: str) -> torch.Tensor:
    """Gₖ = Σ_{j ≥ k} rⱼ (``reward-to-go``) or G₁ at every k (``outcome``), [N, K] → [N, K]."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {', '.join(WEIGHTINGS)}, got {weighting!r}")
    if weighting == "outcome":
        return r.sum(1, keepdim=True).expand_as(r)
    return r.flip(1).cumsum(1).flip(1)


def packed(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The masked entries of each row moved left in order, [N, W] → [N, L] (L = max Σ mask).

    A gather (differentiable); the mask comes back packed alike.
    """
    m = mask.bool()
    order = torch.sort((~m).to(torch.int8), dim=1, stable=True).indices
    width = max(int(m.sum(1).max()), 1)
    order = order[:, :width]
    return x.gather(1, order), m.gather(1, order)


def turn_advantages(
    turn_rewards: torch.Tensor,
    *,
    group_size: int,
    baseline: str,
    scale: str,
    weighting: str,
) -> torch.Tensor:
    """Âᵢ,ₖ = A(G₍·,ₖ₎)ᵢ, each row's advantage at each turn, [N, K] → [N, K].

    A is :func:`~eligibility.torch.group_advantages` of the column Gₖ of the returns
    (:func:`returns`): the samples of a prompt are a group.
    """
    g = returns(turn_rewards, weighting)
    return torch.stack(
        [
            group_advantages(g[:, k], group_size, baseline=baseline, scale=scale)
            for k in range(g.shape[1])
        ],
        dim=1,
    )


def token_advantages(a: torch.Tensor, turn: torch.Tensor) -> torch.Tensor:
    """Âᵢ,ₜ = Âᵢ,ₖ₍ₜ₎ for the turn k of each token, [N, K] and [N, T] → [N, T] (0 off turns)."""
    k = turn.clamp(min=0)
    return torch.where(turn >= 0, a.gather(1, k), torch.zeros((), dtype=a.dtype))


def penalised(
    turn_rewards: torch.Tensor,
    logps: torch.Tensor,
    ref_logps: torch.Tensor,
    mask: torch.Tensor,
    turn: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """r̃ₖ = rₖ − β Dₖ, Dₖ = Σ_{t ∈ turn k} (ℓₜ − ℓ^ref_ₜ) over the model's tokens (detached)."""
    m = mask.bool()
    return torch.stack(
        [
            kl_penalised_rewards(turn_rewards[:, k], logps, ref_logps, m & (turn == k), beta=beta)
            for k in range(turn_rewards.shape[1])
        ],
        dim=1,
    )


__all__ = [
    "WEIGHTINGS",
    "Credit",
    "packed",
    "penalised",
    "returns",
    "token_advantages",
    "turn_advantages",
]
