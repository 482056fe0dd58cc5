"""Episodes whose replies are scripted, their worlds real: the sampler's turn function replaced.

Each episode j's first reply calls ``increment`` once (twice for odd j), ``a`` by j; its second
is "Done.". The model is never asked, so a tiny random model's run makes tool calls every
update. ``python tests/_scripted_replies.py finetune …`` runs the command line so.
"""

from __future__ import annotations

import sys

import torch

from eligibility.lm.batch import Completions


def calls(j: int) -> str:
    """Episode j's first reply: ``increment`` called once (twice for odd j), ``a`` by j."""
    return "".join(
        f'<tool_call>{{"name": "increment", "arguments": {{"a": {j % 3 + k}}}}}</tool_call>'
        for k in range(1 + j % 2)
    )


def drawer(policy, task, episodes, rows, cache, t_max, temperature, rng, sampling):
    """``lm.episodes.play._drawer``'s stand-in: each turn's replies from the script."""
    tok, turn = task.tokenizer, [0]

    def replies(live, share):
        turn[0] += 1
        texts = [calls(j) if turn[0] == 1 else "Done." for j in live]
        ids = [[*tok.encode(t), tok.eos_token_id] for t in texts]
        out = torch.full((len(ids), max(map(len, ids))), tok.eos_token_id)
        mask = torch.zeros_like(out)
        for r, x in enumerate(ids):
            out[r, : len(x)], mask[r, : len(x)] = torch.tensor(x), 1
        return Completions(
            prompt_ids=torch.zeros((len(ids), 1), dtype=torch.long),
            prompt_mask=torch.ones((len(ids), 1), dtype=torch.long),
            completion_ids=out,
            completion_mask=mask,
            logps=-mask.double(),
            ended=torch.ones(len(ids), dtype=torch.bool),
        )

    return replies


def scripted(monkeypatch=None):
    """``lm.episodes.play`` with :func:`drawer` (through ``monkeypatch`` where given)."""
    import eligibility.lm.episodes.play as play

    if monkeypatch is None:
        play._drawer = drawer
    else:
        monkeypatch.setattr(play, "_drawer", drawer)
    return play


if __name__ == "__main__":
    from eligibility.cli import program

    scripted()
    sys.argv = ["eligibility", *sys.argv[1:]]
    sys.exit(program())
