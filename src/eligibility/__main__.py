"""``python -m eligibility``: the command line, as launchers start a module.

``torchrun --nproc-per-node N -m eligibility finetune …`` and ``accelerate launch -m
eligibility finetune …`` start it this way.
"""

import sys

from eligibility.cli import program

if __name__ == "__main__":
    sys.exit(program())
