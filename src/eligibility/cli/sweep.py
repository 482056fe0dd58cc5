"""``eligibility sweep ENV_ID``: every setting of a grid on many seeds, in parallel."""

from __future__ import annotations

import argparse
import json
import signal
import sys
from typing import Any


def add_parser(subparsers: Any) -> None:
    """Register ``sweep``."""
    p = subparsers.add_parser(
        "sweep",
        help="train a grid of settings on many seeds, in parallel (local or Ray), with statistics",
        description=(
            "Every (setting, seed) is an ordinary run directory under --out; re-running the "
            "same command resumes the sweep. Prints per setting the success rate and IQM, "
            "median and mean with 95%% bootstrap intervals; writes results.json, curves.png, "
            "profile.png and steps_to_solve.png."
        ),
    )
    p.add_argument("env_id", help="Gymnasium environment id, e.g. CartPole-v1")
    seeds = p.add_mutually_exclusive_group()
    seeds.add_argument("--seeds", type=int, default=10, help="seeds 0 … N−1 (default: 10)")
    seeds.add_argument("--seed-list", type=int, nargs="+", metavar="S", help="these seeds")
    p.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        metavar="KEY=V1,V2",
        help="a Config field and its values (repeatable; the grid is their product), e.g. "
        "baseline=none,rloo lr=0.01,0.05 hidden=32,64x64; env_kwargs takes JSON objects "
        'separated by ; e.g. \'env_kwargs={"is_slippery": true}; {"is_slippery": false}\'',
    )
    p.add_argument("--jobs", type=int, default=None, help="runs in parallel (default: cores)")
    p.add_argument("--launcher", choices=["local", "ray"], default="local", help="where runs run")
    p.add_argument(
        "--address",
        default=None,
        help="Ray head HOST:PORT (default: RAY_ADDRESS, else a local Ray)",
    )
    p.add_argument("--out", default=None, help="sweep directory (default: sweeps/ENV-TIME-RANDOM)")
    p.add_argument("--format", choices=["text", "markdown", "json"], default="text")
    p.add_argument("--no-pictures", dest="pictures", action="store_false", help="skip the PNGs")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run (or resume) the sweep; print the table."""
    from eligibility.sweep import sweep
    from eligibility.sweep.report import markdown, render_text
    from eligibility.sweep.run import RESULTS_JSON, to_json
    from eligibility.sweep.signals import SweepInterrupted

    if args.seed_list is None and args.seeds < 1:
        raise ValueError(f"the grid is empty: --seeds must be at least 1, got {args.seeds}")
    try:
        result = sweep(
            args.env_id,
            seeds=args.seed_list if args.seed_list is not None else args.seeds,
            sets=args.sets,
            jobs=args.jobs,
            launcher=args.launcher,
            address=args.address,
            out=args.out,
            progress=True,
            pictures=args.pictures,
        )
    except SweepInterrupted as stop:
        name = signal.Signals(stop.signum).name
        sys.stderr.write(
            f"eligibility sweep: interrupted ({name}); {stop.finished} of {stop.total} runs ended "
            f"(in {stop.out_dir / RESULTS_JSON}), the others are checkpointed; re-run the same "
            "command to resume\n"
        )
        return 128 + stop.signum
    if args.format == "json":
        text = json.dumps(to_json(result), indent=1, allow_nan=False, ensure_ascii=False) + "\n"
        sys.stdout.flush()
        raw = getattr(sys.stdout, "buffer", None)  # UTF-8 whatever the locale says
        if raw is None:
            sys.stdout.write(text)
        else:
            raw.write(text.encode("utf-8"))
            raw.flush()
    elif args.format == "markdown":
        print(markdown(result))
    else:
        render_text(result)
    return 1 if result.failed else 0
