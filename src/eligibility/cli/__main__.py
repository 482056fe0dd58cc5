"""``python -m eligibility.cli``."""

from eligibility.cli import main

raise SystemExit(main())
