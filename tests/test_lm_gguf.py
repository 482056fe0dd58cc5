"""``--model path/model.gguf``: a GGUF file loads through transformers, dequantised to float32.

The GGUF file is built here, from a tiny random Llama and a byte-level BPE tokenizer trained on a
few sentences, by the ``gguf`` package's writer in llama.cpp's layout (query and key rows
permuted as llama.cpp's converter permutes them, the MLP quantised to Q8_0 by ``gguf.quants``).
The truth is the model it was written from: the loaded weights are its weights (the Q8_0 ones
are ``gguf.quants.dequantize`` of what was written), its logits are its logits, and the
tokenizer encodes as the trained one does. Nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _needs import installed
from eligibility.lm.edge import hf

installed("gguf", "accelerate")  # imported where used: 0.7 s a worker otherwise
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "copy the letters a b c",
    "what is the capital of France? Paris.",
    "the quick brown fox jumps over the lazy dog",
    "answer with the number only: 12 + 7 = 19",
] * 4
Q8_0 = ("ffn_gate", "ffn_up", "ffn_down")
KW = {"d_model": 1, "n_layer": 1, "n_head": 1, "max_positions": 8}  # build_model's tiny sizes


def _tokenizer():
    """A byte-level BPE (GPT-2's scheme) trained on CORPUS, the specials first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    return tok


def _permute(w, n_head: int):
    """llama.cpp's converter's reordering of a query/key matrix's rows (rotary halves → pairs)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def _write_gguf(path: Path, model, tok) -> dict:
    """``model`` and ``tok`` as a llama GGUF file; returns the weights a reader must find."""
    import gguf
    import numpy as np

    cfg = model.config
    vocab = tok.get_vocab()
    tokens = sorted(vocab, key=vocab.get)
    merges = json.loads(tok.to_str())["model"]["merges"]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_vocab_size(len(tokens))
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])  # 3: control, 1: normal
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in merges])
    w.add_bos_token_id(vocab["<|im_start|>"])
    w.add_eos_token_id(vocab["<|im_end|>"])
    w.add_pad_token_id(vocab["<|endoftext|>"])
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT)
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    expected = {}
    names = {"model.embed_tokens.weight": "token_embd", "model.norm.weight": "output_norm"}
    names["lm_head.weight"] = "output"
    parts = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
    parts |= {f"self_attn.{p}_proj": f"attn_{p}" for p in "qkv"} | {
        "self_attn.o_proj": "attn_output"
    }
    parts |= {f"mlp.{p}_proj": f"ffn_{p}" for p in ("gate", "up", "down")}
    for i in range(cfg.num_hidden_layers):
        names |= {f"model.layers.{i}.{k}.weight": f"blk.{i}.{v}" for k, v in parts.items()}
    for key, name in names.items():
        a = sd[key].astype(np.float32)
        if name.endswith(("attn_q", "attn_k")):
            heads = cfg.num_attention_heads if name.endswith("q") else cfg.num_key_value_heads
            w.add_tensor(f"{name}.weight", _permute(a, heads))
        elif name.endswith(Q8_0):
            q = gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor(f"{name}.weight", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            a = gguf.quants.dequantize(q, gguf.GGMLQuantizationType.Q8_0).reshape(a.shape)
        else:
            w.add_tensor(f"{name}.weight", a)
        expected[key] = torch.from_numpy(np.ascontiguousarray(a))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    """(path of the GGUF file, the weights it holds, the trained tokenizer)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = _tokenizer()
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=tok.get_vocab_size(),
            hidden_size=64,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=64,
            tie_word_embeddings=False,
        )
    )
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    return path, _write_gguf(path, model, tok), tok


def test_a_gguf_loads_as_the_model_it_was_written_from_and_saves(tiny_gguf, tmp_path):
    """Every weight is the written one (Q8_0 dequantised as gguf does); the model is not marked
    quantized, so save_pretrained writes a directory that loads back to the same logits."""
    from transformers import AutoModelForCausalLM

    from eligibility.lm.edge.loaders import build_model

    path, expected, _ = tiny_gguf
    model = build_model(str(path), 10, 0, d_model=1, n_layer=1, n_head=1, max_positions=8)
    state = model.state_dict()
    assert set(state) == set(expected)
    for key, want in expected.items():
        assert torch.equal(state[key], want), key
    assert getattr(model.config, "quantization_config", None) is None
    assert all(p.dtype == torch.float32 for p in model.parameters())

    ids = torch.tensor([[5, 40, 41, 90, 7, 3]])
    reference = type(model)(model.config)  # the same weights, loaded by torch alone
    reference.load_state_dict(expected)
    with torch.no_grad():
        got, want = model(input_ids=ids).logits, reference.eval()(input_ids=ids).logits
    assert torch.equal(got, want)

    hf.save_pretrained(model, None, tmp_path / "out")
    back = AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32)
    with torch.no_grad():
        assert torch.equal(back(input_ids=ids).logits, got)


def test_the_tokenizer_and_chat_template_come_from_the_file(tiny_gguf, tmp_path):
    """Text encodes as the trained tokenizer encodes it; a conversation goes through the file's
    chat template; EOS is the file's; the tokenizer saves with its template."""
    import jinja2

    path, _, trained = tiny_gguf
    tok = hf.load_tokenizer(str(path))
    text = "the lazy fox: 12 + 7"
    assert hf.encode_prompt(tok, text) == trained.encode(text).ids
    messages = [{"role": "user", "content": "copy the letters a b"}]
    rendered = jinja2.Template(CHAT).render(messages=messages, add_generation_prompt=True)
    assert hf.encode_prompt(tok, messages) == trained.encode(rendered).ids
    assert tok.eos_token == "<|im_end|>" and hf.decode(tok, trained.encode(text).ids) == text
    tok.save_pretrained(tmp_path / "tok")
    again = transformers.AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert again.chat_template == CHAT and hf.encode_prompt(again, messages) == hf.encode_prompt(
        tok, messages
    )


def test_a_missing_or_broken_gguf_is_one_valueerror(tmp_path):
    from eligibility.lm.edge.loaders import build_model

    kw = KW
    with pytest.raises(ValueError, match=r"--model .*nope\.gguf: no such GGUF file"):
        build_model(str(tmp_path / "nope.gguf"), 10, 0, **kw)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 60)
    with pytest.raises(ValueError, match=r"bad\.gguf: the file is truncated or corrupt"):
        build_model(str(bad), 10, 0, **kw)
    with pytest.raises(ValueError, match=r"bad\.gguf: the file is truncated or corrupt"):
        hf.load_tokenizer(str(bad))


@pytest.mark.parametrize("kept", [0.9, 0.5, 0.01])
def test_a_truncated_gguf_is_said_to_be_truncated_not_to_lack_a_tokenizer(
    tiny_gguf, tmp_path, kept
):
    """A download cut short was "holds no tokenizer … save one there" or a reshape error;
    the whole file loads (the test above), so what differs is the cut."""
    from eligibility.lm.edge.loaders import build_model

    path, _, _ = tiny_gguf
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: int(len(data) * kept)])
    for load in (hf.load_tokenizer, lambda p: build_model(p, 10, 0, **KW)):
        with pytest.raises(ValueError) as err:
            load(str(cut))
        message = str(err.value)
        assert f"cut.gguf: the file is truncated or corrupt ({cut.stat().st_size} bytes" in message
        assert "tokenizer" not in message and "\n" not in message


@pytest.mark.slow
def test_finetune_on_a_gguf_then_export_writes_a_hugging_face_directory(
    tiny_gguf, tmp_path, capsys
):
    """``finetune --model FILE.gguf`` trains (the prompts through the file's chat template) and
    ``export`` writes the run's weights and the file's tokenizer as a normal directory."""

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from eligibility.cli import main
    from eligibility.lm import runs

    path, _, _ = tiny_gguf
    argv, rows = _finetune_argv(tiny_gguf, tmp_path)
    out = tmp_path / "run"
    assert main(argv) == 0
    assert main(["export", str(out), str(tmp_path / "exported")]) == 0
    capsys.readouterr()

    _, model, task = runs.load(out)
    task.close()
    exported = AutoModelForCausalLM.from_pretrained(tmp_path / "exported", dtype=torch.float32)
    assert set(exported.state_dict()) == set(model.state_dict())
    for k, v in model.state_dict().items():
        assert torch.equal(exported.state_dict()[k], v), k
    tok = AutoTokenizer.from_pretrained(tmp_path / "exported")
    assert tok.chat_template == CHAT
    assert hf.encode_prompt(tok, rows[0]["prompt"]) == list(task.prompts[0])

    argv[argv.index(str(path))] = str(tmp_path / "missing.gguf")
    argv[-1] = str(tmp_path / "run2")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.gguf: no such GGUF file" in err[0], err


def _finetune_argv(tiny_gguf, tmp_path) -> tuple[list[str], list[dict]]:
    """``finetune`` of the GGUF file on three conversational prompts into tmp_path/run."""
    import textwrap

    path, _, _ = tiny_gguf
    rows = [{"prompt": [{"role": "user", "content": f"copy {w}"}], "answer": w} for w in "abc"]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "rewards.py").write_text(
        textwrap.dedent(
            """
            def exact(completions, answer, **kw):
                return [float(c[0]["content"] == a) for c, a in zip(completions, answer)]
            """
        )
    )
    argv = ["finetune", f"{tmp_path}/rewards.py:exact", "--model", str(path)]
    argv += ["--prompts", str(tmp_path / "train.jsonl"), "--max-completion-length", "3"]
    argv += ["--group-size", "2", "--prompts-per-batch", "2", "--max-updates", "2"]
    argv += ["--dtype", "float32"]  # the same run on every machine (auto may be bf16)
    argv += ["--target-accuracy", "none", "--no-progress", "--out", str(tmp_path / "run")]
    return argv, rows


@pytest.mark.slow
def test_a_lora_run_on_a_gguf_exports_an_adapter_naming_the_file_and_how_to_load_it(
    tiny_gguf, tmp_path, capsys
):
    """The adapter's base_model_name_or_path was the file's folder, which no from_pretrained
    loads, and peft's "Could not find a config file" came through; the file is named now, one
    warning gives the calls that load it, and they give back the run's policy (its logits)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from eligibility.cli import main
    from eligibility.lm import runs

    path, _, _ = tiny_gguf
    argv, _ = _finetune_argv(tiny_gguf, tmp_path)
    (tmp_path / "longer.py").write_text(  # rewards that differ within a group: B A moves
        "def chars(completions, **kw):\n    return [len(c[0]['content']) for c in completions]\n"
    )
    argv[1] = f"{tmp_path}/longer.py:chars"
    assert main([*argv, "--lora-r", "2", "--lr", "0.05"]) == 0
    capsys.readouterr()
    adapter = tmp_path / "adapter"
    assert main(["export", str(tmp_path / "run"), str(adapter)]) == 0
    err = capsys.readouterr().err
    assert "Could not find a config file" not in err
    assert err.count("\n") == 1 and f"gguf_file={path.name!r}" in err, err
    saved = json.loads((adapter / "adapter_config.json").read_text())
    assert saved["base_model_name_or_path"] == str(path)

    _, trained, task = runs.load(tmp_path / "run")
    task.close()
    ids = torch.tensor([list(task.prompts[0])])
    base = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    )
    with torch.no_grad():
        before = base(ids).logits
        loaded = PeftModel.from_pretrained(base, adapter).eval()
        want, got = trained(ids).logits, loaded(ids).logits
    assert not torch.allclose(want, before)  # the adapters moved the policy
    torch.testing.assert_close(got, want)
