"""A Hugging Face model directory as a TRL user brings one: a tiny random Llama, its own
WordLevel tokenizer (``tokenizers``) with a chat template, saved with ``save_pretrained``; and
one whose chat template renders tools and tool calls (:func:`tool_model_dir`), for episodes."""

from __future__ import annotations

from pathlib import Path

WORDS = ("a", "b", "c", "d", "copy", "user", "assistant", ":")
SPECIALS = ("<eos>", "<bos>", "<pad>", "<unk>")
CHAT = (
    "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


def tokenizer(chat: bool = True):
    """A WordLevel tokenizer over WORDS: BOS first in every encoding, EOS ``<eos>``."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate((*SPECIALS, *WORDS))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<eos>",
        bos_token="<bos>",
        pad_token="<pad>",
        unk_token="<unk>",
    )
    if chat:
        fast.chat_template = CHAT
    return fast


def model(vocab_size: int, max_positions: int = 64, seed: int = 0):
    """A one-layer random Llama (width 32)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(
        LlamaConfig(
            vocab_size=vocab_size,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=max_positions,
            eos_token_id=0,
            bos_token_id=1,
            pad_token_id=2,
        )
    )


def model_dir(path: Path, *, chat: bool = True, with_tokenizer: bool = True, **kw) -> Path:
    """``path`` holding the model (and its tokenizer), as ``save_pretrained`` writes them."""
    tok = tokenizer(chat)
    model(len(tok), **kw).save_pretrained(path)
    if with_tokenizer:
        tok.save_pretrained(path)
    return path


TOOLS_SHOWN = (
    "{% if tools %}<|im_start|>system\nTools:{% for t in tools %} {{ t.function.name }}"
    "{% endfor %}<|im_end|>\n{% endif %}"
)
"""The part of :data:`TOOL_CHAT` that shows the model its tools."""
CALLS_SHOWN = (
    "{% for c in m.tool_calls or [] %}<tool_call>"
    "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}</tool_call>"
    "{% endfor %}"
)
"""The part of :data:`TOOL_CHAT` that shows a reply's tool calls."""
TOOL_CHAT = (
    TOOLS_SHOWN + "{% for m in messages %}"
    "{% if m.role == 'assistant' %}<|im_start|>assistant\n{{ m.content }}"
    + CALLS_SHOWN
    + "<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>{{ m.content }}"
    "</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A chat template in Qwen's shape that renders tools, tool calls and tool results."""


def tool_tokenizer():
    """Every byte a token, and the chat's two specials (``<|im_end|>`` the EOS), with
    :data:`TOOL_CHAT`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   additional_special_tokens=["<|im_start|>"])  # fmt: skip
    fast.chat_template = TOOL_CHAT
    return fast


def tool_model_dir(path: Path, tokenizer=None) -> Path:
    """``path`` holding a one-layer random Llama (width 16, 512 positions) and
    :func:`tool_tokenizer` (or ``tokenizer``), as ``save_pretrained`` writes them."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tokenizer if tokenizer is not None else tool_tokenizer()
    torch.manual_seed(0)
    sizes = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2)
    config = LlamaConfig(vocab_size=len(tok), num_key_value_heads=2, **sizes,
                         max_position_embeddings=512, eos_token_id=tok.eos_token_id)  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path
