"""The kit's model that calls tools: SmolLM2-135M-Instruct, a tool template, a short warm start.

No small instruct model whose chat template renders tools is on the package registries, so
``make kit`` makes one (``lm_real_kit.py --models smollm2-135m-tools``):

- the template is TRL's own ``qwen2_5.jinja`` (read from TRL's pinned wheel,
  ``pip download --no-deps``, never copied here): Qwen 2.5's tool format, which SmolLM2's ChatML
  tokens (``<|im_start|>``, ``<|im_end|>``) already speak and which TRL's ``GRPOTrainer``
  accepts for tool use (``add_response_schema``);
- the warm start is supervised, on :func:`chats`: conversations in which the assistant calls a
  tool (``<tool_call>{"name": …, "arguments": …}</tool_call>``), reads its result and answers in
  one short line. Only the assistant's tokens are the loss; only the last :data:`LAYERS` decoder
  layers learn (the rest, the tied embedding among them, are frozen), so a step costs a
  forward and a short backward. Seeded: the same kit on the same machine and thread count.

The chats' tools and tasks (a counter to bring to a number, sums, products, capitals,
temperatures) are tools of the same shape as the agent tutorial's ``Counter``, so the warm
model calls a tool it is offered; what it calls it with is what the tutorial's REINFORCE run
then trains.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

TRL_WHEEL = "trl==1.16.0"
TRL_TEMPLATE = "trl/chat_templates/qwen2_5.jinja"
"""The wheel that holds the template, and its path in the wheel."""
STEPS, BATCH, LR, LAYERS, CHATS = 10, 4, 2e-4, 6, 240
"""The warm start: optimiser steps, chats a step, Adam's step size, layers trained, chats made."""


def template(root: Path) -> str:
    """TRL's ``qwen2_5.jinja``, from its wheel under ``root/wheels`` (downloaded if absent)."""
    wheels = root / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    version = TRL_WHEEL.split("==")[1]
    found = sorted(wheels.glob(f"trl-{version}-*.whl"))
    if not found:
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
        subprocess.run([*pip, "-q", "-d", str(wheels), TRL_WHEEL], check=True)
        found = sorted(wheels.glob(f"trl-{version}-*.whl"))
    with zipfile.ZipFile(found[0]) as z:
        return z.read(TRL_TEMPLATE).decode()


# The tools of the chats: each described to the model by its signature and docstring, as
# finetune describes a user's (transformers' get_json_schema).


def increment(a: int) -> int:
    """Add to the counter.

    Args:
        a: The value to add.
    """
    return a


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def multiply(a: int, b: int) -> int:
    """Multiply two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a * b


def capital(country: str) -> str:
    """The capital city of a country.

    Args:
        country: The country's name.
    """
    return country


def temperature(city: str) -> float:
    """The temperature in a city now, in degrees Celsius.

    Args:
        city: The city's name.
    """
    return 0.0


CAPITALS = {
    "France": "Paris",
    "Peru": "Lima",
    "Japan": "Tokyo",
    "Kenya": "Nairobi",
    "Chile": "Santiago",
    "Italy": "Rome",
    "Egypt": "Cairo",
    "Canada": "Ottawa",
    "Spain": "Madrid",
    "Norway": "Oslo",
    "Ghana": "Accra",
    "India": "New Delhi",
}


def _counter(r: random.Random) -> tuple[str, str, dict[str, Any], str, str]:
    target, start = r.randint(2, 20), 0
    while start == target:
        start = r.randint(0, 9)
    text = f"Reach {target} The counter starts at {start}."
    return text, "increment", {"a": target - start}, str(target), f"The counter is at {target}."


def _sum(r: random.Random) -> tuple[str, str, dict[str, Any], str, str]:
    a, b = r.randint(1, 60), r.randint(1, 60)
    return f"What is {a} plus {b}?", "add", {"a": a, "b": b}, str(a + b), f"{a + b}."


def _product(r: random.Random) -> tuple[str, str, dict[str, Any], str, str]:
    a, b = r.randint(2, 12), r.randint(2, 12)
    return f"What is {a} times {b}?", "multiply", {"a": a, "b": b}, str(a * b), f"{a * b}."


def _capital(r: random.Random) -> tuple[str, str, dict[str, Any], str, str]:
    country = r.choice(sorted(CAPITALS))
    city = CAPITALS[country]
    return f"What is the capital of {country}?", "capital", {"country": country}, city, f"{city}."


def _weather(r: random.Random) -> tuple[str, str, dict[str, Any], str, str]:
    city, t = r.choice(sorted(CAPITALS.values())), r.randint(-5, 35)
    answer = f"It is {t} °C in {city}."
    return f"How warm is it in {city}?", "temperature", {"city": city}, f"{t}.0", answer


KINDS: tuple[Callable[[random.Random], tuple[str, str, dict[str, Any], str, str]], ...] = (
    _counter,
    _counter,
    _sum,
    _product,
    _capital,
    _weather,
)
"""The chats' kinds, the counter's twice (the tutorial's shape)."""
TOOLS = {f.__name__: f for f in (increment, add, multiply, capital, temperature)}


def chats(n: int = CHATS, seed: int = 0) -> list[tuple[list[dict[str, Any]], list[Callable]]]:
    """``n`` conversations (messages, tools offered): a user asks, the assistant calls the right
    one of one or two tools offered, the tool answers, the assistant answers in one line."""
    r = random.Random(seed)
    out = []
    for _ in range(n):
        text, name, args, result, answer = r.choice(KINDS)(r)
        offered = [TOOLS[name]]
        if r.random() < 0.5:  # a second tool, not to be called: the name is read, not guessed
            offered.insert(r.randrange(2), r.choice([f for k, f in TOOLS.items() if k != name]))
        call = {"type": "function", "function": {"name": name, "arguments": args}}
        messages = [
            {"role": "user", "content": text},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": name, "content": result},
            {"role": "assistant", "content": answer},
        ]
        out.append((messages, offered))
    return out


def _ids(tok: Any, messages: list[dict[str, Any]], tools: list[Callable], gen: bool) -> list[int]:
    ids = tok.apply_chat_template(messages, tools=tools, tokenize=True, add_generation_prompt=gen)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    return [int(i) for i in ids]


def tokens_and_mask(
    tok: Any, messages: list[dict[str, Any]], tools: list[Callable]
) -> tuple[list[int], list[bool]]:
    """The chat's token ids, and which are the assistant's (its replies through their EOS):
    each reply is the tokens between the conversation before it with the assistant's header and
    the conversation through it (the template keeps a conversation's start as it grows)."""
    ids = _ids(tok, messages, tools, gen=False)
    mask = [False] * len(ids)
    for k, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        start = len(_ids(tok, messages[:k], tools, gen=True))
        end = len(_ids(tok, messages[: k + 1], tools, gen=False))
        eos = [i for i in range(start, end) if ids[i] == tok.eos_token_id]
        end = eos[-1] + 1 if eos else end  # a reply ends at its EOS (the newline is the world's)
        mask[start:end] = [True] * (end - start)
    return ids, mask


def warm_start(model: Any, tok: Any, *, steps: int = STEPS, seed: int = 0) -> list[float]:
    """Supervised steps on :func:`chats`: the loss −mean ln π of the assistant's tokens; only
    the last :data:`LAYERS` layers and the final norm learn. Returns each step's loss."""
    import torch

    torch.manual_seed(seed)
    data = [tokens_and_mask(tok, m, t) for m, t in chats(seed=seed)]
    body = model.model
    for p in model.parameters():
        p.requires_grad_(False)
    learn = [*body.layers[-LAYERS:].parameters(), *body.norm.parameters()]
    for p in learn:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(learn, lr=LR, weight_decay=0.0)
    order = random.Random(seed)
    losses = []
    model.train()
    for step in range(steps):
        batch = order.sample(data, BATCH)
        width = max(len(ids) for ids, _ in batch)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in batch])
        on = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in batch])
        scored = torch.tensor([m + [False] * (width - len(m)) for _, m in batch])
        hidden = body(input_ids=ids, attention_mask=on).last_hidden_state
        at = scored[:, 1:]  # token t+1 is predicted from position t: logits only where scored
        logits = model.lm_head(hidden[:, :-1][at])
        loss = torch.nn.functional.cross_entropy(logits, ids[:, 1:][at])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        print(f"warm start {step + 1}/{steps}: loss {losses[-1]:.3f}", file=sys.stderr)
    model.eval()
    for p in model.parameters():
        p.requires_grad_(True)
    return losses


def calls_made(model: Any, tok: Any, n: int = 4, seed: int = 1) -> float:
    """The share of ``n`` unseen chats' first greedy replies that make a well-formed call."""
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
    from eligibility.lm.episodes.chat import parse_calls

    made = 0
    for messages, tools in chats(n, seed=seed):
        ids = torch.tensor([_ids(tok, messages[:1], tools, gen=True)])
        with torch.no_grad():
            out = model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=48,
                eos_token_id=tok.eos_token_id,
                pad_token_id=tok.pad_token_id,
            )
        reply = tok.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
        calls = parse_calls(reply)
        made += bool(calls) and all(c.error is None for c in calls)
    return made / n


def build(
    root: Path, source: Path, out: Path, load: Callable[[Path], Any], *, steps: int = STEPS
) -> dict[str, Any]:
    """``out``: the model at ``source`` with TRL's tool template, warm-started; what it did.

    ``load``: (model, tokenizer) of a kit directory (the kit's ``lm_real_kit.load_dir``).
    """
    from eligibility.lm.edge import hf

    model, tok = load(source)
    tok.chat_template = template(root)
    losses = warm_start(model, tok, steps=steps)
    hf.save_pretrained(model, tok, out, overwrite=True)
    calls = calls_made(model, tok)  # unseen chats' first replies (SmolLM2 before: none)
    done = {"steps": steps, "first_loss": losses[0], "last_loss": losses[-1], "calls": calls}
    (out / "warm_start.json").write_text(json.dumps(done, indent=1) + "\n")
    return done
