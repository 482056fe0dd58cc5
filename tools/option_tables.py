"""Print the sequence option table's Markdown tables, or regenerate them in the docs.

    python tools/option_tables.py --markdown
    python tools/option_tables.py --update docs/torch-losses.md docs/check.md docs/lm.md

The tables are views of the rows of :mod:`eligibility.torch.options`, printed by
:mod:`eligibility.torch.option_docs`; a doc holds one between ``<!-- table:NAME -->`` and
``<!-- /table:NAME -->`` (tests/test_torch_options.py fails when a doc and the table differ).
"""

from __future__ import annotations

from eligibility.torch.option_docs import main

if __name__ == "__main__":
    raise SystemExit(main())
