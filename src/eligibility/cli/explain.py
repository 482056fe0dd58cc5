"""``eligibility explain``: derive the backpropagation rule of a policy distribution, step by step.

    eligibility explain categorical --probs 0.69 0.1 0.2 0.01 --action 0

Numbers after a parameter flag form one row; several quoted rows (or rows separated by ``;``)
make a batch, explained row by row:

    eligibility explain categorical --probs "0.69 0.1 0.2 0.01" "0.5 0.5 0 0" --action 0 1
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from eligibility._dataclass_args import path_option
from eligibility._output import quoted
from eligibility.cli import COMMANDS, UsageError
from eligibility.cli.convention import Exit, config_from_args, configure_command
from eligibility.distributions import REGISTRY

_ROWS = """\
numbers and rows:
  The numbers after a flag form one row (commas work too). Several quoted tokens that each hold
  several numbers, or rows separated by ';', make a batch of rows, each explained in turn:
  --probs "0.69 0.1 0.2 0.01" "0.5 0.5 0 0" or --probs "0.69 0.1 0.2 0.01; 0.5 0.5 0 0".
  Then give one value per row (--action 0 1), a whole vector per row where the value is a
  vector (counts), and one value per unit where the numbers of a row are independent units
  (a distribution whose parameters are numbers, not vectors).
  A -inf logit (a masked category) is a number like any other: --logits 0 1.5 -inf.
"""


def _examples() -> str:
    """Every registered distribution's example lines, then the formats and the rows."""
    lines = [
        f"  eligibility explain {name} {line}"
        for name, spec in REGISTRY.items()
        for line in spec.examples
    ]
    lines.append("  (any of them with --format markdown, latex or json; --autograd adds torch's)")
    lines.append(
        "  (and --plot rule.png for a picture, --html rule.html for a live categorical page)"
    )
    return "examples:\n" + "\n".join(lines) + "\n\n" + _ROWS


def _parameter_flags() -> dict[str, tuple[str, str]]:
    """Every parameter of every registered distribution: its metavar, and its help.

    A parameter several distributions share (``probs``) is one flag; its help says what it
    means for each (``bernoulli: …; categorical, multinomial: …``).
    """
    meanings: dict[str, dict[str, list[str]]] = {}
    metavars: dict[str, str] = {}
    for name, spec in REGISTRY.items():
        for param, flag in spec.flags.items():
            metavars.setdefault(param, flag.metavar)
            meanings.setdefault(param, {}).setdefault(flag.meaning, []).append(name)
    return {
        param: (metavars[param], "; ".join(f"{', '.join(d)}: {m}" for m, d in by.items()))
        for param, by in meanings.items()
    }


PARAMETER_FLAGS = _parameter_flags()
"""Every distribution parameter (torch's names) as a flag: its metavar and help, from the specs."""

COUNT_PARAMETERS = frozenset(
    spec.count_param for spec in REGISTRY.values() if spec.count_param is not None
)
"""The parameters that are a single integer (``total_count``), not rows of numbers."""


_NEGATIVE_NUMBER = re.compile(
    r"^[-−](?:(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?|inf|infinity|∞)(?:[,;].*)?$", re.IGNORECASE
)
"""A token argparse must read as a negative number, not an option: ``-2``, ``-1e-30``, ``-inf``."""


def add_parser(subparsers: Any) -> None:
    """Register ``explain``."""
    p = subparsers.add_parser(
        "explain",
        help=COMMANDS["explain"].help,
        description=(
            "Derive Williams' characteristic eligibility e = ∂ ln π(a)/∂θ for the given "
            "parameters and action, step by step: the forward pass, the rule in symbols and "
            "with the numbers, the chain rule through exp (what prob.backward() gives), why "
            "unsampled entries are not zero, the logits form and a linear unit on top; with "
            "--autograd, every number held against torch.distributions by autograd."
        ),
        epilog=_examples(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # argparse reads a token that starts with "-" as an option unless it looks like a negative
    # number to it, and to it "-inf" and "-1e-30" do not; both are numbers here (a masked logit).
    p._negative_number_matcher = _NEGATIVE_NUMBER
    p.add_argument(
        "dist",
        metavar="DIST",
        help=", ".join(REGISTRY),
    )
    for name, (metavar, text) in PARAMETER_FLAGS.items():
        nargs = None if name in COUNT_PARAMETERS else "+"
        p.add_argument(_flag(name), nargs=nargs, metavar=metavar, help=text)
    p.add_argument(
        "--action",
        "--value",
        dest="value",
        nargs="+",
        metavar="V",
        help="the action or value taken, in the distribution's support: "
        + "; ".join(f"{name} {spec.support}" for name, spec in REGISTRY.items()),
    )
    p.add_argument(
        "--features",
        nargs="+",
        metavar="X",
        help="inputs x₁ … x_d of a linear unit z = W x + b (μ = W x + b for a loc): carries "
        "the rule into W and b",
    )
    configure_command(
        p,
        ExplainConfig,
        run,
        skip=("dist", "value", "features"),
        extras=tuple(PARAMETER_FLAGS),
    )


@dataclass(frozen=True)
class ExplainConfig:
    """What ``eligibility explain`` derives, and how it shows it.

    ``dist``, ``value`` and ``features`` are added to the parser by hand (their help comes
    from the distributions); the distribution's parameters (``--probs``, ``--loc``, …) are
    flags of their own, read by :func:`params_from_args`.
    """

    dist: str = field(metadata={"help": "the distribution"})
    value: tuple[str, ...] | None = field(
        default=None, metadata={"help": "the action or value taken (--action or --value)"}
    )
    features: tuple[str, ...] | None = field(
        default=None, metadata={"help": "inputs of a linear unit"}
    )
    through: Literal["log", "exp", "both"] = field(
        default="both",
        metadata={
            "help": "differentiate ln π (log), π = exp(ln π) as prob.backward() does (exp), or "
            "both; JSON always carries both"
        },
    )
    format: Literal["text", "markdown", "latex", "json"] = field(
        default="text",
        metadata={"help": "output format (text: colour on a terminal, plain when piped)"},
    )
    precision: int = field(
        default=4,
        metadata={"help": "decimals shown (JSON keeps full precision)", "metavar": "N"},
    )
    autograd: bool = field(
        default=False,
        metadata={
            "help": "also replay every number in torch.distributions and hold it against "
            "autograd, in float64: the last section (imports torch, about a second more)"
        },
    )
    plot: str | None = path_option(
        "also draw the rule to this file (.png, .svg or .pdf): a categorical's π and "
        "its gradients w.r.t. probs and logits; for the others, the score against each "
        "parameter around the given point",
    )
    html: str | None = path_option(
        "also write one self-contained page (categorical) with a slider per weight "
        "or logit that recomputes the rule, the numbers and the picture as you move them",
    )

    def __post_init__(self) -> None:
        if not 0 <= self.precision <= 15:
            raise UsageError(f"--precision must be between 0 and 15, got {self.precision}")


# parsing ------------------------------------------------------------------------------------


def _number(flag: str, tok: str) -> float:
    try:
        return float(tok.replace("−", "-").replace("∞", "inf"))
    except ValueError:
        raise UsageError(
            f"{flag}: {quoted(tok)} is not a number; give numbers separated by spaces, e.g. "
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


def _shape_value(flag: str, v: np.ndarray, batch: tuple[int, ...], event: tuple[int, ...]) -> Any:
    """Fit the flat value numbers to the batch shape and the value's event shape."""
    shape = batch + event
    if v.size == int(np.prod(shape)):
        return v.reshape(shape) if shape else v[0]
    if event and v.size == int(np.prod(event)):
        return v.reshape(event)  # one count vector for every row
    if not event and v.size == 1:
        return np.full(batch, v[0])  # one value for every row or unit
    per = f"{int(np.prod(event))} numbers for each of" if event else "one number for each of"
    raise UsageError(
        f"{flag}: give {per} the {int(np.prod(batch))} rows/units laid out like the "
        f"parameters (shape {batch}), got {v.size} numbers"
    )


def _layout(dist: str, params: dict[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(batch shape, value event shape) from the parameters, or None if they do not line up.

    Only to lay out the value; whether the parameters are right is the library's check.
    """
    spec = REGISTRY.get(dist)
    arrays = [v for name, v in params.items() if name not in COUNT_PARAMETERS]
    if spec is None or not arrays:
        return None
    try:
        layout = tuple(np.broadcast_shapes(*(np.shape(a) for a in arrays)))
    except ValueError:
        return None
    batch = layout[: len(layout) - spec.param_event_dims]
    event = layout[len(layout) - spec.value_event_dims :] if spec.value_event_dims else ()
    return batch, event


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def params_from_args(args: argparse.Namespace) -> tuple[str, dict[str, Any], Any, Any]:
    """(dist, params, value, features) from the parsed command line.

    Only parsing happens here; the distribution, its parameters and the value are checked
    once, by the library (:func:`eligibility.explain.explain`), whose ``ValueError`` is the
    one-line error.
    """
    params: dict[str, Any] = {}
    for name in PARAMETER_FLAGS:
        tokens = getattr(args, name)
        if tokens is None:
            continue
        if name in COUNT_PARAMETERS:
            n = _number(_flag(name), tokens)
            params[name] = int(n) if n.is_integer() else n
        else:
            params[name] = parse_rows(_flag(name), tokens)
    if args.value is None:
        raise UsageError("missing --action (or --value): the action or value taken")
    value: Any = _flat("--action", args.value)
    layout = _layout(args.dist, params)
    if layout is not None:
        value = _shape_value("--action", value, *layout)
    features = None if args.features is None else parse_rows("--features", args.features)
    return args.dist, params, value, features


def _write_files(config: ExplainConfig, x: Any) -> None:
    """The picture and the page, if asked for; each named on stderr (stdout is the derivation).

    Both are checked before either is written, so a refused page leaves no picture behind.
    """
    from eligibility._output import note

    if config.html:
        from eligibility.explain import page

        page.html(x)
    if config.plot:
        from eligibility.explain import plot

        note("explain", f"plot written to {plot.save(x, config.plot)}")
    if config.html:
        note("explain", f"page written to {page.save(x, config.html)}")


def run(args: argparse.Namespace) -> int:
    """Derive, render and print the explanation; bad input raises ValueError (exit 2)."""
    from eligibility.explain import explain, render

    config = config_from_args(ExplainConfig, args)
    dist, params, value, features = params_from_args(args)
    x = explain(
        dist, value, through=config.through, features=features, autograd=config.autograd, **params
    )
    _write_files(config, x)
    if config.format == "text":
        render.print_text(x.document, precision=config.precision, file=sys.stdout)
    else:
        sys.stdout.write(x.render(config.format, precision=config.precision))
    return Exit.OK
