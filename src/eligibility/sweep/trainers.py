"""The sweep's trainers are the one table of :mod:`eligibility.trainers`.

This module kept its old name for code that imports the table from here; the sweep itself reads
:mod:`eligibility.trainers`, as the command line, ``evaluate`` and ``export`` do.
"""

from __future__ import annotations

from eligibility.trainers import DEFAULT, TRAINERS, Trainer, command_of, named

__all__ = ["DEFAULT", "TRAINERS", "Trainer", "command_of", "named"]
