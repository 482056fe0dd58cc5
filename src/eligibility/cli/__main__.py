"""``python -m eligibility.cli``."""

from eligibility.cli import program

raise SystemExit(program())
