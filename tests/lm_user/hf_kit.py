"""A Hugging Face model directory as a TRL user brings one: a tiny random Llama, its own
WordLevel tokenizer (``tokenizers``) with a chat template, saved with ``save_pretrained``."""

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
