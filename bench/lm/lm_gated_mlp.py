"""A scoring pass as the library runs it, beside autograd's plain ops for the MLP or the products.

    python bench/lm/lm_gated_mlp.py --shape bench/lm/shapes/smollm2-135m --json $OUT/gated.json
    python bench/lm/lm_gated_mlp.py --shape bench/lm/shapes/qwen2.5-0.5b --dtype bfloat16 --pairs 0

The direct forward's MLP, W_down (silu(g) ⊙ u) + b, keeps only [g | u] for the backward pass and
computes silu(g) ⊙ u again there (``lm.edge.llama.DirectLM.gated``); autograd's plain ops keep
silu(g) and the product as well. A full fine-tune's products of stacked weights (q, k, v; gate,
up) keep no copy of the stacked weights, nor autocast's cast of any weight
(``lm.edge.llama._stacked_linear``); ``F.linear`` of the stacked weights keeps both. ``--undo``
says which the plain system undoes: ``mlp`` (the default), ``products``, or ``both``. Both
systems run in this process on one model, the shape's config with
random weights (``lm_gpu.build``) in a :class:`Policy`, over a batch as ``finetune`` samples one
(``--prompts`` distinct prompts of ``--prompt`` tokens, each ``--group`` times, completions of
``--t-max`` tokens), scored and backpropagated with ``finetune``'s loss (as
``lm_score_profile.py`` does). Reported, for each:

- the bytes kept for the backward pass (the distinct storages autograd saves, the weights left
  out), at T_max and at T_max / 2: their difference over the completion tokens between and the
  layers is what one completion token keeps in one layer;
- whether the two give the same gradient, bit for bit;
- ``--pairs`` timed passes of each, alternating (which goes first alternates too), and the
  median of the pairwise ratios (the library's time over the plain ops').
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1] / "src"), str(HERE)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--shape", default=str(HERE / "shapes" / "smollm2-135m"))
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--t-max", type=int, default=64)
    p.add_argument("--dtype", default="float32", help="float32, or bfloat16 (autocast)")
    p.add_argument("--pairs", type=int, default=10, help="timed pairs (0: none)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--undo", choices=("mlp", "products", "both"), default="mlp")
    p.add_argument("--json", default=None)
    args = p.parse_args()

    import torch
    from torch.nn import functional as F
    from transformers import AutoModelForCausalLM

    from eligibility.lm import objective
    from eligibility.lm.edge import llama
    from eligibility.lm.policy import Policy
    from eligibility.lm.sample import token_logps
    from lm_gpu import build
    from lm_score_profile import kept_by, scoring_batch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model = AutoModelForCausalLM.from_pretrained(build(Path(args.shape), Path(tmp)))
    model = model.float().eval()
    vocab, layers = model.config.vocab_size, model.config.num_hidden_layers
    policy = Policy(model, device=torch.device("cpu"), dtype=args.dtype)
    n = args.prompts * args.group

    def batch(t: int):  # type: ignore[no-untyped-def]
        return scoring_batch(vocab, args.prompts, args.group, args.prompt, t, torch.device("cpu"))

    def plain(self, gate_up, down):  # type: ignore[no-untyped-def]
        gate, up = gate_up.chunk(2, dim=-1)
        return self.linear(F.silu(gate) * up, down)

    def stacked(x, maps):  # type: ignore[no-untyped-def]
        return F.linear(x, *llama._stacked([(m, []) for m in maps]))

    library = (llama.DirectLM.gated, llama._stacked_linear)
    systems = {
        "library": library,
        "plain": (
            plain if args.undo in ("mlp", "both") else library[0],
            stacked if args.undo in ("products", "both") else library[1],
        ),
    }

    def one_pass(system: str, t: int) -> float:
        llama.DirectLM.gated, llama._stacked_linear = systems[system]
        made, rewards, settings = batch(t)
        for prm in policy.params:
            prm.grad = None
        t0 = time.perf_counter()
        with policy.precision(), policy.training():
            lp = token_logps(policy, made, vocab_size=vocab)
            objective.loss(lp, rewards, made.completion_mask.bool(), settings)[0].backward()
        return time.perf_counter() - t0

    rows = {}
    for system in systems:
        half, whole = (
            kept_by(lambda s=system, t=t: one_pass(s, t), model)
            for t in (args.t_max // 2, args.t_max)
        )
        per = (whole - half) / (n * (args.t_max - args.t_max // 2) * layers)
        rows[system] = {"kept_bytes": whole, "kept_bytes_half_t": half, "kept_per_token_layer": per}
        rows[system]["grads"] = [prm.grad.clone() for prm in policy.params]
    same = all(
        torch.equal(a, b)
        for a, b in zip(rows["library"]["grads"], rows["plain"]["grads"], strict=True)
    )
    walls: dict[str, list[float]] = {s: [] for s in systems}
    for i in range(args.pairs):
        for system in list(systems)[:: 1 if i % 2 == 0 else -1]:
            walls[system].append(one_pass(system, args.t_max))
    ratios = [a / b for a, b in zip(walls["library"], walls["plain"], strict=True)]

    print(
        f"{Path(args.shape).name} (random weights), {args.dtype}, {args.threads} threads: "
        f"{n} rows ({args.prompts} prompts × G {args.group}), prompt {args.prompt}, "
        f"T {args.t_max}; plain: {args.undo} undone"
    )
    for system, row in rows.items():
        print(
            f"{system:8s} kept for the backward {row['kept_bytes'] / 2**30:.3f} GiB; a completion "
            f"token in a layer {row['kept_per_token_layer'] / 1024:.2f} KiB"
        )
    print(f"the same gradient, bit for bit: {same}")
    if ratios:
        print(
            f"library ÷ plain, s a pass: median {statistics.median(ratios):.3f} of {len(ratios)} "
            f"pairs (min {min(ratios):.3f}, max {max(ratios):.3f})"
        )
    result = {
        "argv": sys.argv,
        "torch": torch.__version__,
        "shape": Path(args.shape).name,
        "dtype": args.dtype,
        "undo": args.undo,
        "rows": n,
        "t_max": args.t_max,
        "layers": layers,
        "systems": {s: {k: v for k, v in r.items() if k != "grads"} for s, r in rows.items()},
        "same_gradient": same,
        "walls_s": walls,
        "ratios": ratios,
        "median_ratio": statistics.median(ratios) if ratios else None,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
