"""Whether a GGUF file is whole: the question asked when transformers cannot load one.

transformers' GGUF loader (and its tokenizer converter) fails on a file cut short, an
interrupted download or copy, with whatever its parser met first (a ``reshape`` of too few
bytes, an ``unpack_from`` past the end), which reads as a missing tokenizer or an unsupported
model. The ``gguf`` package's reader lays the header, the metadata and every tensor's bytes
over the file: where it cannot, the file is not whole, and the user is told so.
"""

from __future__ import annotations

import os


def damage(path: str) -> str | None:
    """Why the GGUF file at ``path`` cannot be read whole (None: the ``gguf`` reader reads it).

    Read only after a load failed: the reader walks every metadata entry (a tokenizer's
    vocabulary, 10⁵ strings) and would double a good file's load time.
    """
    import gguf

    try:
        gguf.GGUFReader(path, "r")
    except Exception as err:  # its parser raises ValueError, struct.error, IndexError, …
        first = (str(err).strip().splitlines() or [type(err).__name__])[0][:160]
        return (
            f"the file is truncated or corrupt ({os.path.getsize(path)} bytes, and the gguf "
            f"reader stops: {first}); download or convert it again"
        )
    return None
