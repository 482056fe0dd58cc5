"""What ``lm/`` asks of a user's tokenizer: the part of ``transformers``' tokenizers it calls.

The tokenizer itself is loaded at the edge (``lm.edge.hf.load_tokenizer``); the modules that
render a chat template, decode a reply or export the model name it by this protocol, so that
they import nothing of ``transformers`` (``tests/test_lm_policy.py``'s fence).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol


class Tokenizer(Protocol):
    """A Hugging Face tokenizer as ``lm/`` uses it (``PreTrainedTokenizerBase`` has it)."""

    eos_token_id: int | None

    def __len__(self) -> int: ...

    def decode(self, token_ids: Sequence[int], *, skip_special_tokens: bool = ...) -> str:
        """The text of ``token_ids``."""
        ...

    def apply_chat_template(self, conversation: list[dict[str, object]], **kw: object) -> object:
        """The template's rendering (``tokenize=True``: token ids, or a ``BatchEncoding``)."""
        ...

    def save_pretrained(self, save_directory: str | Path) -> object:
        """The tokenizer's files written in ``save_directory`` (the exported model's)."""
        ...
