"""``eligibility explain``: derive the backpropagation rule of a policy distribution, step by step.

    eligibility explain categorical --probs 0.69 0.1 0.2 0.01 --action 0

Numbers after a parameter flag form one row; several quoted rows (or rows separated by ``;``)
make a batch, explained row by row:

    eligibility explain categorical --probs "0.69 0.1 0.2 0.01" "0.5 0.5 0 0" --action 0 1
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from eligibility.cli import UsageError

_EXAMPLES = """\
examples:
  eligibility explain categorical --probs 0.69 0.1 0.2 0.01 --action 0
  eligibility explain categorical --probs 69 10 20 1 --action 0          # ×100: e ÷100
  eligibility explain categorical --logits 1.2 -0.3 0.5 --action 2 --features 1.0 -2.0
  eligibility explain categorical --probs "0.69 0.1 0.2 0.01" "0.5 0.5 0 0" --action 0 1
  eligibility explain multinomial --total-count 3 --probs 0.5 0.3 0.2 --value 2 0 1
  eligibility explain bernoulli --probs 0.3 --value 1
  eligibility explain bernoulli --logits 0.4 -1.0 --value 1 0      # two units
  eligibility explain normal --loc 0.5 --scale 2 --value 1.2
  eligibility explain categorical --probs 0.69 0.1 0.2 0.01 --action 0 --format json

numbers and rows:
  The numbers after a flag form one row (commas work too). Several quoted tokens that each hold
  several numbers, or rows separated by ';', make a batch of rows, each explained in turn:
  --probs "0.69 0.1 0.2 0.01" "0.5 0.5 0 0" or --probs "0.69 0.1 0.2 0.01; 0.5 0.5 0 0".
  Then give one action per row (--action 0 1), one count vector per row for multinomial, one
  value per unit for bernoulli and normal (the numbers in a row are independent units).
  A -inf logit (a masked category) must sit inside a quoted row: --logits "0 1.5 -inf".
"""


def add_parser(subparsers: Any) -> None:
    """Register ``explain``."""
    p = subparsers.add_parser(
        "explain",
        help="derive and show the eligibility (backpropagation rule) for given numbers",
        description=(
            "Derive Williams' characteristic eligibility e = ∂ ln π(a)/∂θ for the given "
            "parameters and action, step by step: the forward pass, the rule in symbols and "
            "with the numbers, the chain rule through exp (what prob.backward() gives), why "
            "unsampled entries are not zero, the logits form and a linear unit on top, and an "
            "autograd cross-check with torch when it is installed."
        ),
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "dist",
        metavar="DIST",
        help="bernoulli, categorical, multinomial or normal",
    )
    p.add_argument("--probs", nargs="+", metavar="P", help="probabilities / relative weights")
    p.add_argument("--logits", nargs="+", metavar="Z", help="logits (instead of --probs)")
    p.add_argument("--total-count", metavar="N", help="multinomial: the number of draws n")
    p.add_argument("--loc", nargs="+", metavar="MU", help="normal: the mean μ")
    p.add_argument("--scale", nargs="+", metavar="SIGMA", help="normal: the std σ > 0")
    p.add_argument(
        "--action",
        "--value",
        dest="value",
        nargs="+",
        metavar="V",
        help="the action taken: a category index (one per row), a count vector (multinomial), "
        "0/1 per unit (bernoulli) or a real number per unit (normal)",
    )
    p.add_argument(
        "--features",
        nargs="+",
        metavar="X",
        help="inputs x₁ … x_d of a linear unit z = W x + b (μ = W x + b for normal): carries "
        "the rule into W and b",
    )
    p.add_argument(
        "--through",
        choices=("log", "exp", "both"),
        default="both",
        help="differentiate ln π (log), π = exp(ln π) as prob.backward() does (exp), or both "
        "(default); JSON always carries both",
    )
    p.add_argument(
        "--format",
        choices=("text", "markdown", "latex", "json"),
        default="text",
        help="output format (default: text; colour on a terminal, plain when piped)",
    )
    p.add_argument(
        "--precision",
        type=int,
        default=4,
        metavar="N",
        help="decimals shown (default 4; JSON keeps full precision)",
    )
    p.set_defaults(run=run)


# parsing ------------------------------------------------------------------------------------


def _number(flag: str, tok: str) -> float:
    try:
        return float(tok.replace("−", "-").replace("∞", "inf"))
    except ValueError:
        raise UsageError(
            f"{flag}: {tok!r} is not a number; give numbers separated by spaces, e.g. "
            f"{flag} 0.5 1 -2"
        ) from None


def parse_rows(flag: str, tokens: list[str]) -> np.ndarray:
    """Numbers after ``flag``: one row (a 1-d array), or a batch of rows (a 2-d array).

    Rows are explicit when a token holds ``;`` or more than one number; otherwise every token
    is one number of a single row.
    """
    pieces: list[list[str]] = []
    explicit = False
    for tok in tokens:
        parts = tok.split(";")
        explicit |= len(parts) > 1
        for part in parts:
            nums = part.replace(",", " ").split()
            explicit |= len(nums) > 1
            if nums:
                pieces.append(nums)
    if not pieces:
        raise UsageError(f"{flag}: no numbers given")
    if not explicit:
        return np.array([_number(flag, t) for [t] in pieces], dtype=np.float64)
    rows = [[_number(flag, t) for t in piece] for piece in pieces]
    lengths = sorted({len(r) for r in rows})
    if len(lengths) > 1:
        raise UsageError(
            f"{flag}: rows have different lengths ({', '.join(map(str, lengths))}); give "
            "every row the same number of entries"
        )
    arr = np.array(rows, dtype=np.float64)
    return arr[0] if arr.shape[0] == 1 else arr


def _flat(flag: str, tokens: list[str]) -> np.ndarray:
    return np.ravel(parse_rows(flag, tokens))


def _shape_value(dist: str, flag: str, v: np.ndarray, layout: tuple[int, ...]) -> Any:
    """Fit the flat value numbers to what the distribution expects for ``layout``."""
    if dist == "categorical":
        rows = layout[:-1]
        need = int(np.prod(rows)) if rows else 1
        if v.size == need:
            return v.reshape(rows) if rows else v[0]
        if rows and v.size == 1:
            return np.full(rows, v[0])
        per = f"one action per row ({need} rows)" if rows else "one action"
        raise UsageError(f"{flag}: give {per}, got {v.size} numbers")
    if dist == "multinomial":
        k = layout[-1]
        if v.size == int(np.prod(layout)):
            return v.reshape(layout)
        if v.size == k:
            return v
        raise UsageError(
            f"{flag}: give a count vector of {k} counts (one per category)"
            + (f" for each of the {layout[0]} rows" if len(layout) > 1 else "")
            + f", got {v.size} numbers"
        )
    size = int(np.prod(layout))
    if v.size == size:
        return v.reshape(layout)
    if v.size == 1:
        return np.full(layout, v[0])
    raise UsageError(
        f"{flag}: give one value per unit ({size} in all, laid out like the parameters), "
        f"got {v.size} numbers"
    )


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def params_from_args(args: argparse.Namespace) -> tuple[str, dict[str, Any], Any, Any]:
    """(dist, params, value, features) from the parsed command line, with CLI-level checks."""
    from eligibility.api import DISTRIBUTIONS, PARAMETERS

    dist = args.dist
    if dist not in PARAMETERS:
        raise UsageError(f"unknown distribution {dist!r}; choose one of {', '.join(DISTRIBUTIONS)}")
    given = {
        k
        for k in ("probs", "logits", "total_count", "loc", "scale")
        if getattr(args, k) is not None
    }
    extra = sorted(given - set(PARAMETERS[dist]))
    if extra:
        takes = ", ".join(_flag(k) for k in sorted(PARAMETERS[dist]))
        raise UsageError(f"{dist} takes no {', '.join(map(_flag, extra))}; it takes {takes}")
    params: dict[str, Any] = {}
    if dist == "normal":
        missing = [_flag(k) for k in ("loc", "scale") if k not in given]
        if missing:
            raise UsageError(f"normal needs --loc and --scale; missing {' and '.join(missing)}")
        loc, scale = parse_rows("--loc", args.loc), parse_rows("--scale", args.scale)
        try:
            layout = tuple(np.broadcast_shapes(loc.shape, scale.shape))
        except ValueError:
            raise UsageError(
                f"--loc and --scale do not line up (shapes {loc.shape} and {scale.shape}); "
                "give one scale, or one per loc"
            ) from None
        params = {"loc": loc, "scale": scale}
    else:
        forms = [k for k in ("probs", "logits") if k in given]
        if len(forms) != 1:
            state = "both" if forms else "neither"
            raise UsageError(f"{dist} needs exactly one of --probs or --logits (got {state})")
        form = forms[0]
        params[form] = parse_rows(_flag(form), getattr(args, form))
        layout = params[form].shape
        if dist == "multinomial":
            if args.total_count is None:
                raise UsageError("multinomial needs --total-count N (the number of draws)")
            n = _number("--total-count", args.total_count)
            params["total_count"] = int(n) if n.is_integer() else n
    if args.value is None:
        example = {"categorical": "--action 0", "multinomial": "--value 2 0 1"}.get(
            dist, "--value 1"
        )
        raise UsageError(f"missing --action (or --value): the action taken, e.g. {example}")
    value = _shape_value(dist, "--action", _flat("--action", args.value), layout)
    features = None if args.features is None else parse_rows("--features", args.features)
    return dist, params, value, features


def run(args: argparse.Namespace) -> int:
    """Derive, render and print the explanation; bad input raises ValueError (exit 2)."""
    from eligibility.explain import explain, render

    if not 0 <= args.precision <= 15:
        raise UsageError(f"--precision must be between 0 and 15, got {args.precision}")
    dist, params, value, features = params_from_args(args)
    x = explain(dist, value, through=args.through, features=features, **params)
    if args.format == "text":
        render.print_text(x, precision=args.precision, file=sys.stdout)
    else:
        sys.stdout.write(x.render(args.format, precision=args.precision))
    return 0
