"""A kit model learning to call a calculator: ``eligibility finetune --env`` beside TRL's
``GRPOTrainer(environment_factory=...)``, the same class given to both, wall to a held-out
success rate.

    make kit
    python bench/lm/lm_tool_race.py prepare
    OMP_NUM_THREADS=2 python bench/lm/lm_tool_race.py run --seeds 0 1 2 --g 4 --prompts 2 \
        --t-max 48 --max-tool-calls 1 --updates 12 --eval-every 2 --stop-at 0.9 \
        --json bench/results/lm_tool_race.json
    python bench/lm/lm_tool_race.py report bench/results/lm_tool_race.json --target 0.9

``prepare`` writes, into the kit (``make kit``; outside the repository):

- ``models/smollm2-135m-instruct-tools/``: SmolLM2-135M-Instruct (its weights and tokenizer
  linked, not copied) with TRL's Qwen2.5 chat template (``trl/chat_templates/qwen2_5.jinja``,
  read from the installed TRL) in place of its own. SmolLM2's template renders neither tools
  nor tool calls, and TRL refuses it (``supports_tool_calling``: "The provided chat template does
  not support tool calling"); the Qwen2.5 template is ChatML, as SmolLM2's is, with Hermes-style
  ``<tool_call>{...}</tool_call>`` calls, which TRL parses (``add_response_schema`` knows it)
  and ``finetune`` reads. With no system message it opens with Qwen's default one.
- ``tasks/multiply-tool/{train,heldout}.jsonl``: "What is A times B?" with A from 100–999 and B
  from 10–99 (answers of 4–5 digits, which the model does not get right alone: greedily it
  answers "347 * 29 = 892"), 256 training and 32 held-out pairs (distinct, drawn once from
  ``random.Random(0)``), in TRL's conventions: a conversational ``prompt``, ``answer`` and
  ``task`` (``multiply``: the kit's ``rewards.py`` scores it). Each prompt opens with two worked
  examples as earlier turns (23 × 41 and 518 × 76: the user asks, the assistant calls
  ``multiply``, the tool answers, the assistant gives the number): without them the model never
  wrote a tool call in 24 samples at temperature 1; with two, about one sample in 24 was the
  right call (with three, greedy already calls right, nothing left to learn).

``--shots N`` (``prepare``, ``run``): N worked examples (``multiply-tool-N``; 2 is the first
race's ``multiply-tool``); ``--factors 3``: "A times B times C", two rounds of calls
(``multiply3-tool-N``, its worked examples two rounds each); ``--env-task counter``: the
tutorial's counter to bring to a target (``counter.py``: ``Counter`` and its reward
``reached``, ``counter-tool``: "Reach T" from a start); ``--env-task words``: the calculator's
products asked as word problems, no worked example (``words-tool``, :data:`WORDS`); ``--env-task
weather``: one figure of a city's weather, read out of the whole report its one tool answers
(``weather.py``: ``Weather``; ``weather-tool-N``, N worked examples, :func:`weather_rows`);
``--model``:
another model of the kit (``smollm2-135m-tools``, the warm-started one). The probes for a task
where learning shows (``docs/measurements/lm.md``, *Looking for an agent task where learning
shows*) used them.

``run``: every seed × system, each in a process of its own, the systems alternating in order
from one seed to the next, on the same model directory, files, rate, G completions of P prompts
an update, temperature 1, gradient norm clipped at 1, float32 (or ``--dtype bfloat16`` on both),
``--threads`` CPU threads, at most ``--max-tool-calls`` rounds of calls an episode (then it
ends), ``bench/lm/calculator.py:Calculator`` the environment, the kit's ``correct`` (exact match
of the final reply, 1 or 0) the reward and the held-out metric:

- ``eligibility``: ``eligibility finetune rewards.py:correct --env calculator.py:Calculator
  --max-tool-calls K --max-completion-length T`` with its defaults for a pretrained model (RLOO,
  a sum over the model's tokens, β = 0, Adam), T the limit of each reply; its own held-out
  evaluation (greedy episodes played with the calculator, judged by their return: the reward
  ``correct`` of the last reply).
- ``trl``: ``GRPOTrainer(environment_factory=Calculator, reward_funcs=correct)`` with TRL 1.16's
  loss defaults (``loss_type="dapo"``, ``scale_rewards="group"``, β = 0),
  ``max_tool_calling_iterations=K``, AdamW, gradient checkpointing off.
  ``max_completion_length`` bounds TRL's whole completion, the tool's tokens included, so it is
  set to (K + 1)·T + K·S, S the tokens the template renders around one tool answer: the same
  room for the model's tokens as ours. The held-out evaluation is a ``TrainerCallback`` playing
  greedy episodes (Hugging Face ``generate``, T tokens a reply) as TRL plays them: the reply
  parsed by TRL's ``parse_response``, the calculator called, the tool message's tokens from the
  trainer's own ``_get_tool_suffix_ids``, the last reply scored by ``correct``.

Per run, as ``lm_real_race.py`` records it: the held-out success at every ``--eval-every``
updates with the training seconds at it (evaluations taken out), seconds per update, the
process's wall, CPU seconds and peak memory, and the tool calls an episode at each update
(ours: ``metrics.csv``'s ``tool_calls``; TRL's: its ``tools/call_frequency``). ``report
--target A``: the updates and training seconds to the first held-out success ≥ A.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import lm_real_race  # noqa: E402
from lm_real_race import KIT  # noqa: E402

TASK, BASE = "multiply-tool", "smollm2-135m-instruct"
MODEL = f"{BASE}-tools"
ENV = HERE / "calculator.py"
COUNTER = HERE / "counter.py"
WEATHER = HERE / "weather.py"


def setting(args: argparse.Namespace) -> tuple[str, Path, str, Path, str]:
    """(the kit's task, the environment's file and class, the reward's file and function) of a
    run: the calculator's multiplications (``--env-task multiply``) or the counter to bring to a
    target (``counter``: ``counter-tool``, the counter's own ``reached``)."""
    named = task_name(args.shots, args.factors, args.env_task)
    if args.env_task.startswith("counter"):
        return named, COUNTER, "Counter", COUNTER, "reached"
    if args.env_task == "weather":
        return named, WEATHER, "Weather", KIT / "tasks" / "rewards.py", "correct"
    return (
        named,
        ENV,
        "Calculator",
        KIT / "tasks" / "rewards.py",
        "correct",
    )


def counter_rows(
    n_train: int = 160, n_held: int = 32, seed: int = 0, near: bool = False
) -> tuple[list, list]:
    """The rows "Reach T" from a start: T from 10–30, the start from 0–9, distinct pairs, the
    held-out ones apart from the trained; ``near``: the start from 0–20 and T 1–9 above it (189
    pairs: 29 held out after the 160 trained on)."""
    if near:
        pairs = [(s, s + d) for s in range(21) for d in range(1, 10)]
    else:
        pairs = [(s, t) for s in range(10) for t in range(10, 31)]
    random.Random(seed).shuffle(pairs)
    out = [{"prompt": [{"role": "user", "content": f"Reach {t}"}], "start": s, "target": t}
           for s, t in pairs[: n_train + n_held]]  # fmt: skip
    return out[:n_train], out[n_train:]


WORDS = (
    "A box holds {b} eggs. How many eggs are in {a} boxes?",
    "Each ticket costs {b} dollars. How many dollars do {a} tickets cost?",
    "A train travels {b} km a day. How many km does it travel in {a} days?",
    "A hall has {a} rows of {b} chairs. How many chairs are in the hall?",
    "A farmer plants {b} trees in each of {a} fields. How many trees does he plant?",
    "A printer prints {b} pages a minute. How many pages does it print in {a} minutes?",
    "Each crate weighs {b} kg. How many kg do {a} crates weigh?",
    "A school orders {a} packs of {b} pencils. How many pencils does it get?",
)
"""The word problems of ``--env-task words``: a product asked in words, never "A times B"."""


def word_rows(n_train: int = 256, n_held: int = 32, seed: int = 0) -> tuple[list, list]:
    """The rows of ``--env-task words``: a product A × B (A from 100–999, B from 10–99) asked as a
    word problem (:data:`WORDS`, one drawn a row) and "Reply with the number only."; no worked
    example; the held-out pairs apart from the trained ones."""
    rng, pairs = random.Random(seed), set()
    while len(pairs) < n_train + n_held:
        pairs.add((rng.randint(100, 999), rng.randint(10, 99)))
    ordered = sorted(pairs, key=lambda _: rng.random())
    out = []
    for a, b in ordered:
        q = rng.choice(WORDS).format(a=a, b=b) + " Reply with the number only."
        out.append({"prompt": [{"role": "user", "content": q}], "answer": str(a * b),
                    "task": "multiply"})  # fmt: skip
    return out[:n_train], out[n_train:]


CITIES = (
    "Lyon", "Porto", "Leeds", "Graz", "Turku", "Bergen", "Ghent", "Malmo", "Split", "Brno",
    "Cork", "Basel", "Bari", "Gdansk", "Tartu", "Aarhus", "Nice", "Bilbao", "Utrecht", "Kaunas",
)  # fmt: skip
"""The cities of ``--env-task weather``."""


WEATHER_SHOTS = (("Oslo", "wind", (12, 30, 55, 3)), ("Riga", "humidity", (18, 9, 71, 0)))
"""The worked examples of ``--env-task weather`` (city, the field asked, the four figures)."""


def weather_shot(city: str, field: str, figures: tuple[int, ...]) -> list[dict]:
    """A worked example as earlier turns: the question, the call, the report, the number."""
    from weather import FIELDS, Weather

    env = Weather()
    env.reset(city, **dict(zip(FIELDS, figures, strict=True)))
    call = {"type": "function", "function": {"name": "weather", "arguments": {"city": city}}}
    return [
        {
            "role": "user",
            "content": f"What is the {field} in {city} today? Reply with the number only.",
        },
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "weather", "content": env.weather(city)},
        {"role": "assistant", "content": str(dict(zip(FIELDS, figures, strict=True))[field])},
    ]


def weather_rows(
    n_train: int = 256, n_held: int = 32, seed: int = 0, shots: int = 0
) -> tuple[list, list]:
    """The rows of ``--env-task weather``: one figure of a city's weather asked ("What is the
    humidity in Lyon today? Reply with the number only."), the city's four figures drawn a row
    (temperature 0–35, wind 5–60, humidity 20–99, rain 0–30, ``weather.py``'s ``FIELDS``), the
    answer the asked one; the first ``shots`` worked examples (:data:`WEATHER_SHOTS`) before
    each question; the held-out rows after the trained ones."""
    rng = random.Random(seed)
    ranges = {"temperature": (0, 35), "wind": (5, 60), "humidity": (20, 99), "rain": (0, 30)}
    examples = [m for shot in WEATHER_SHOTS[:shots] for m in weather_shot(*shot)]
    out = []
    for _ in range(n_train + n_held):
        city, field = rng.choice(CITIES), rng.choice(tuple(ranges))
        figures = {f: rng.randint(*r) for f, r in ranges.items()}
        q = f"What is the {field} in {city} today? Reply with the number only."
        out.append({"prompt": [*examples, {"role": "user", "content": q}],
                    "answer": str(figures[field]), "task": "multiply", "city": city,
                    **figures})  # fmt: skip
    return out[:n_train], out[n_train:]


SHOTS = ((23, 41), (518, 76))
LINKED = ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json")


def shot(a: int, b: int) -> list[dict]:
    """A worked example as earlier turns: the question, the call, the tool's answer, the number."""
    call = {"type": "function", "function": {"name": "multiply", "arguments": {"a": a, "b": b}}}
    return [
        {"role": "user", "content": f"What is {a} times {b}?"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": "multiply", "content": str(a * b)},
        {"role": "assistant", "content": str(a * b)},
    ]


def chained(factors: tuple[int, ...]) -> list[dict]:
    """A worked example of several factors as earlier turns: one call a round, each on the last
    result, then the number."""
    turns, acc = (
        [{"role": "user", "content": f"What is {' times '.join(map(str, factors))}?"}],
        factors[0],
    )
    for b in factors[1:]:
        args = {"a": acc, "b": b}
        call = {"type": "function", "function": {"name": "multiply", "arguments": args}}
        acc *= b
        turns += [{"role": "assistant", "content": "", "tool_calls": [call]},
                  {"role": "tool", "name": "multiply", "content": str(acc)}]  # fmt: skip
    return [*turns, {"role": "assistant", "content": str(acc)}]


def task_name(shots: int, factors: int = 2, env_task: str = "multiply") -> str:
    """The kit's task of ``--env-task`` with ``shots`` worked examples: ``multiply-tool`` (2, the
    first race's), ``multiply-tool-1``, ``multiply-tool-0``; with three factors
    ``multiply3-tool-0``; ``counter-tool``, ``counter-near-tool``, ``words-tool`` (no worked
    example); ``weather-tool-N``."""
    if env_task.startswith("counter") or env_task == "words":
        return f"{env_task}-tool"
    if env_task == "weather":
        return f"weather-tool-{shots}"
    base = TASK if factors == 2 else TASK.replace("multiply", f"multiply{factors}")
    return base if shots == len(SHOTS) and factors == 2 else f"{base}-{shots}"


def rows(
    n_train: int = 256, n_held: int = 32, seed: int = 0, shots: int = len(SHOTS), factors: int = 2
) -> tuple[list[dict], list[dict]]:
    """The training and held-out rows: distinct (A, B), none of them a worked example's; the
    first ``shots`` worked examples before each question (the same pairs for every ``shots``).

    ``factors`` 3: "What is A times B times C?", A, B, C from 10–99 (answers of 4–6 digits: two
    rounds of calls, the second on the first's result), its worked examples two rounds each.
    """
    rng, pairs = random.Random(seed), set()
    while len(pairs) < n_train + n_held:
        if factors == 3:
            p = (rng.randint(10, 99), rng.randint(10, 99), rng.randint(10, 99))
        else:
            p = (rng.randint(100, 999), rng.randint(10, 99))
        if p not in SHOTS:
            pairs.add(p)
    ordered = sorted(pairs, key=lambda _: rng.random())
    if factors == 3:
        examples = [m for p in ((23, 41, 17), (58, 76, 32))[:shots] for m in chained(p)]
    else:
        examples = [m for a, b in SHOTS[:shots] for m in shot(a, b)]
    asked = [f"What is {' times '.join(map(str, p))}?" for p in ordered]
    out = [
        {"prompt": [*examples, {"role": "user", "content": q}], "answer": str(math.prod(p)),
         "task": "multiply"}
        for p, q in zip(ordered, asked, strict=True)
    ]  # fmt: skip
    return out[:n_train], out[n_train:]


def prepare(
    kit: Path = KIT, shots: int = len(SHOTS), factors: int = 2, env_task: str = "multiply"
) -> None:
    """The model directory with a tool-calling template and the task's files, in the kit."""
    import trl

    base, model = kit / "models" / BASE, kit / "models" / MODEL
    if not base.is_dir():
        raise SystemExit(f"no kit model at {base}: run `make kit` first")
    model.mkdir(parents=True, exist_ok=True)
    for name in LINKED:
        if not (model / name).exists():
            (model / name).symlink_to(base / name)
    config = json.loads((base / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    (model / "tokenizer_config.json").write_text(json.dumps(config, indent=1))
    template = Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja"
    (model / "chat_template.jinja").write_text(template.read_text())
    task = kit / "tasks" / task_name(shots, factors, env_task)
    task.mkdir(parents=True, exist_ok=True)
    if env_task.startswith("counter"):
        made = counter_rows(near=env_task == "counter-near")
    elif env_task == "words":
        made = word_rows()
    elif env_task == "weather":
        made = weather_rows(shots=shots)
    else:
        made = rows(shots=shots, factors=factors)
    for name, split in zip(("train", "heldout"), made, strict=True):
        (task / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in split))
    print(f"{model}\n{task}")


def suffix_length(tok, tools: list) -> int:
    """S: the template's tokens around one tool answer of 5 digits (TRL's ``_get_tool_suffix_ids``
    way: the conversation with the answer less the one ending at the call's EOS)."""
    name = tools[0].__name__
    call = [{"type": "function", "function": {"name": name, "arguments": {}}}]
    head = [{"role": "user", "content": "x"},
            {"role": "assistant", "content": "", "tool_calls": call}]  # fmt: skip
    answer = [{"role": "tool", "name": name, "content": "12345"}]
    before = tok.apply_chat_template(head, tools=tools, tokenize=True, return_dict=False)
    after = tok.apply_chat_template(head + answer, tools=tools, tokenize=True, return_dict=False,
                                    add_generation_prompt=True)  # fmt: skip
    cut = max(i + 1 for i, t in enumerate(before) if t == tok.eos_token_id)
    return len(after) - cut


def answer(env, names: set[str], call: dict) -> dict:
    """The tool message answering one parsed call, as ``GRPOTrainer``'s tool loop answers it
    (``names``: the environment's tools)."""
    try:
        if call["name"] not in names:
            raise ValueError(f"Tool {call['name']} not found.")
        result = getattr(env, call["name"])(**call["arguments"])
    except Exception as err:  # the tool's error is its answer, as TRL gives it
        result = {"error": str(err)}
    return {"role": "tool", "name": call["name"], "content": str(result)}


def greedy_episodes(trainer, model, rows_: list[dict], factory, metric, t_max: int, k: int):
    """Held-out success of greedy episodes played as ``GRPOTrainer`` plays them; (success, calls
    an episode)."""
    import torch
    from trl.chat_template_utils import parse_response

    tok, tools = trainer.processing_class, trainer._env_tools[None]
    names = {fn.__name__ for fn in tools}
    envs = [factory() for _ in rows_]
    prompts = [[dict(m) for m in r["prompt"]] for r in rows_]
    for env, row, prompt in zip(envs, rows_, prompts, strict=True):
        seen = env.reset(**row)
        if seen is not None:
            prompt[-1]["content"] += str(seen)
    ctx = [tok.apply_chat_template(p, tools=tools, chat_template=trainer.chat_template,
                                   add_generation_prompt=True, tokenize=True, return_dict=False)
           for p in prompts]  # fmt: skip
    last, live, calls = [{} for _ in rows_], list(range(len(rows_))), 0
    was, side = model.training, tok.padding_side
    model.eval()
    for rounds in range(k + 1):
        tok.padding_side = "left"
        enc = tok.pad({"input_ids": [ctx[i] for i in live]}, return_tensors="pt")
        tok.padding_side = side
        with torch.no_grad():
            out = model.generate(**enc, do_sample=False, max_new_tokens=t_max,
                                 eos_token_id=tok.eos_token_id,
                                 pad_token_id=tok.pad_token_id)  # fmt: skip
        going = []
        for i, reply in zip(live, out[:, enc["input_ids"].shape[1] :].tolist(), strict=True):
            if tok.eos_token_id in reply:
                reply = reply[: reply.index(tok.eos_token_id) + 1]
            last[i] = parse_response(tok, reply, prefix=ctx[i], tools=tools)
            if not last[i].get("tool_calls") or rounds == k:
                continue
            answers = [answer(envs[i], names, c["function"]) for c in last[i]["tool_calls"]]
            calls += len(answers)
            ctx[i] = ctx[i] + reply + trainer._get_tool_suffix_ids(answers)
            going.append(i)
        live = going
        if not live:
            break
    model.train(was)
    columns = {c: [r[c] for r in rows_] for c in rows_[0] if c != "prompt"}
    scores = metric(prompts=prompts, completions=[[m] for m in last], environments=envs, **columns)
    return float(sum(scores) / len(rows_)), calls / len(rows_)


def trl_child(args: argparse.Namespace, seed: int) -> dict:
    """One ``GRPOTrainer(environment_factory=Calculator)`` run in this process."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import lm_kit

    torch.set_num_threads(args.threads)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    name, env_file, env_class, reward_file, reward_fn = setting(args)
    task, model = KIT / "tasks" / name, KIT / "models" / args.model
    tok = AutoTokenizer.from_pretrained(model, local_files_only=True)
    held = lm_kit.load_rows(task / "heldout.jsonl")
    correct = lm_kit.load_function(reward_file, reward_fn)
    factory = lm_kit.load_function(env_file, env_class)
    budget = (args.max_tool_calls + 1) * args.t_max
    # a tool: a public method but reset and get_reward, as GRPOTrainer reads the class
    tool = next(
        getattr(factory(), m)
        for m in vars(factory)
        if not m.startswith("_") and m not in ("reset", "get_reward")
    )
    budget += args.max_tool_calls * suffix_length(tok, [tool])
    state = {"curve": [], "eval_s": 0.0, "t0": 0.0, "train_s": 0.0, "updates": 0, "user_s": [],
             "tool_calls": [], "eval_tool_calls": []}  # fmt: skip
    spawned = float(os.environ["RACE_SPAWNED"])
    trainer = None

    class HeldOut(TrainerCallback):
        def on_train_begin(self, a, st, control, model=None, **kw):
            if args.eval_on_start:  # the untrained model, before the clock starts
                state["start"], _ = greedy_episodes(trainer, model, held, factory, correct,
                                                    args.t_max, args.max_tool_calls)  # fmt: skip
            state["t0"] = time.perf_counter()

        def on_log(self, a, st, control, logs=None, **kw):
            if logs and "tools/call_frequency" in logs:
                state["tool_calls"].append((st.global_step, logs["tools/call_frequency"]))

        def on_step_end(self, a, st, control, model=None, **kw):
            state["updates"] = st.global_step
            state["train_s"] = time.perf_counter() - state["t0"] - state["eval_s"]
            if st.global_step % args.eval_every == 0:
                t0 = time.perf_counter()
                acc, calls = greedy_episodes(trainer, model, held, factory, correct, args.t_max,
                                             args.max_tool_calls)  # fmt: skip
                state["eval_s"] += time.perf_counter() - t0
                state["curve"].append((st.global_step, acc, state["train_s"]))
                state["eval_tool_calls"].append((st.global_step, calls))
                state["user_s"].append((st.global_step, time.time() - spawned))
                if args.stop_at is not None and acc >= args.stop_at:
                    control.should_training_stop = True

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        settings = lm_kit.trl_settings(args.lr, args.g, args.prompts, budget, args.updates)
        config = GRPOConfig(output_dir=tmp, use_cpu=True, seed=seed, bf16=args.dtype == "bfloat16",
                            **{**settings, "logging_steps": 1},
                            max_tool_calling_iterations=args.max_tool_calls)  # fmt: skip
        trainer = GRPOTrainer(
            model=str(model),
            reward_funcs=correct,
            args=config,
            train_dataset=Dataset.from_list(lm_kit.load_rows(task / "train.jsonl")),
            processing_class=tok,
            callbacks=[HeldOut()],
            environment_factory=factory,
        )
        trainer.train()
    keep = ("curve", "train_s", "updates", "user_s", "tool_calls", "eval_tool_calls")
    start = {"start": state["start"]} if "start" in state else {}
    return {**{k: state[k] for k in keep}, **start, "trl_max_completion_length": budget}


def one(args: argparse.Namespace, system: str, seed: int, env: dict | None = None) -> dict:
    """One run of ``system`` in a child process: a row.

    ``env``: the child's environment (``lm_async.py``'s, with the calculator's delay); by
    default this process's at ``--threads``.
    """
    from lm_trl import child

    if env is None:
        n = str(args.threads)
        env = {**os.environ, "OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n}
        env["TOKENIZERS_PARALLELISM"] = "false"
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), env.get("PYTHONPATH", "")])
    env = dict(env)
    if system == "trl":
        env["RACE_SPAWNED"] = repr(time.time())
        res, use = child([sys.executable, __file__, "trl-child", str(seed), *passed(args)], env)
        res = {**res, **use}
    else:
        name, env_file, env_class, reward_file, reward_fn = setting(args)
        ns = argparse.Namespace(**vars(args), reward_spec=f"{reward_file}:{reward_fn}",
                                episodes=True)  # fmt: skip
        ns.extra = [
            "--env",
            f"{env_file}:{env_class}",
            "--max-tool-calls",
            str(args.max_tool_calls),
        ]
        res = lm_real_race.ours(ns, name, seed, False, env)
    if "train_s" in res:
        res["s_per_update"] = res["train_s"] / max(res["updates"], 1)
    return {"system": system, "task": setting(args)[0], "seed": seed, **res}


def passed(args: argparse.Namespace) -> list[str]:
    """The shared settings, as a child's arguments."""
    keys = ("lr", "g", "prompts", "t_max", "updates", "eval_every", "threads", "max_tool_calls",
            "shots", "factors", "model", "env_task")  # fmt: skip
    out = [x for k in (*keys, "dtype") for x in (f"--{k.replace('_', '-')}", str(getattr(args, k)))]
    out += ["--eval-on-start"] if args.eval_on_start else []
    return out + ([] if args.stop_at is None else ["--stop-at", str(args.stop_at)])


def run(args: argparse.Namespace) -> list[dict]:
    """Every seed × system, the systems' order alternating; rows saved as they end."""
    from lm_trl import save_rows

    out = []
    for k, seed in enumerate(args.seeds):
        for system in args.systems if k % 2 == 0 else args.systems[::-1]:
            out.append(one(args, system, seed))
            print(json.dumps(out[-1]), file=sys.stderr, flush=True)
            save_rows(args.json, out)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    prep = sub.add_parser("prepare", help="the tool model and the task, into the kit")
    r = sub.add_parser("run", help="the side-by-side comparison")
    c = sub.add_parser("trl-child", help=argparse.SUPPRESS)
    for q in (prep, r, c):
        q.add_argument("--shots", type=int, default=len(SHOTS), choices=range(len(SHOTS) + 1),
                       help="worked examples before each question")  # fmt: skip
        q.add_argument("--factors", type=int, default=2, choices=(2, 3),
                       help="3: A times B times C, two rounds of calls")  # fmt: skip
        q.add_argument("--env-task", default="multiply",
                       choices=("multiply", "counter", "counter-near", "words", "weather"),
                       help="the calculator or the counter to bring to a target")  # fmt: skip
    for q in (r, c):
        q.add_argument("--model", default=MODEL, help="a model directory of the kit's models/")
        q.add_argument("--lr", type=float, default=1e-5)
        q.add_argument("--g", type=int, default=4)
        q.add_argument("--prompts", type=int, default=2)
        q.add_argument("--t-max", type=int, default=48, help="T: the tokens of one reply")
        q.add_argument("--max-tool-calls", type=int, default=1, help="K: rounds of tool calls")
        q.add_argument("--updates", type=int, default=12)
        q.add_argument("--eval-every", type=int, default=2)
        q.add_argument("--threads", type=int, default=2)
        q.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
        q.add_argument("--stop-at", type=float, default=None,
                       help="each system stops at its first held-out success >= this")  # fmt: skip
        q.add_argument("--eval-on-start", action="store_true",
                       help="each system's held-out success before its first update too "
                       "(the run's start, its clock not yet running)")  # fmt: skip
    r.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    r.add_argument("--systems", nargs="+", default=["eligibility", "trl"],
                   choices=("eligibility", "trl"))  # fmt: skip
    r.add_argument("--json", default=None)
    c.add_argument("seed", type=int)
    rep = sub.add_parser("report", help="print the tables of result files")
    rep.add_argument("files", nargs="+")
    rep.add_argument("--target", type=float, default=None, help="also the time to this success")
    args = p.parse_args()
    if args.cmd == "prepare":
        prepare(shots=args.shots, factors=args.factors, env_task=args.env_task)
    elif args.cmd == "trl-child":
        print(json.dumps(trl_child(args, args.seed)))
    elif args.cmd == "report":
        out = [row for f in args.files for row in json.loads(Path(f).read_text())["runs"]]
        lm_real_race.report(out)
        if args.target is not None:
            lm_real_race.to_target(out, args.target)
    else:
        lm_real_race.report(run(args))


if __name__ == "__main__":
    main()
