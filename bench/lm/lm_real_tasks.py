"""The real-model kit's tasks: conversational prompts with answers, a tuning and a held-out split.

Six small tasks of the kinds people fine-tune small instruct models for, three to choose
defaults on (``TUNING``) and three kept apart to validate and race them (``HELD_OUT``):

- ``add`` (tuning, arithmetic): "What is 47 + 38? Answer with the number only." → ``85``
- ``date`` (tuning, a format): "Write March 5, 2021 as YYYY-MM-DD. Answer with the date
  only." → ``2021-03-05``
- ``capital`` (tuning, a short answer): "What is the capital of Peru? Answer with the city name
  only." → ``Lima``
- ``multiply`` (held out, arithmetic): "What is 7 times 12? Answer with the number only." →
  ``84``
- ``json`` (held out, a format): "Extract the name and the age from this sentence: … Reply with
  a JSON object only, with the keys "name" and "age"." → ``{"name": "Ana", "age": 34}``
- ``antonym`` (held out, a short answer): 'What is the opposite of "hot"? Answer with one
  word.' → ``cold``

Each task has a ``train`` split and a ``heldout`` split of items never in ``train`` (other
number pairs, dates, countries, words). Rows are TRL's conversational format plus the columns
the rewards read: ``{"prompt": [{"role": "user", "content": …}], "answer": …, "task": …}``.
Deterministic: the splits are drawn from ``random.Random(task name)``.
"""

from __future__ import annotations

import json
import random

TUNING = ("add", "date", "capital")
HELD_OUT = ("multiply", "json", "antonym")
T_MAX = {"add": 8, "date": 12, "capital": 8, "multiply": 8, "json": 24, "antonym": 8}
"""Tokens a greedy completion gets (room for the answer and EOS, with a few to spare)."""
N_HELD_OUT = 64
"""Held-out items per task (fewer where the task has fewer items: a quarter of them)."""

CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid",
    "Portugal": "Lisbon", "Japan": "Tokyo", "China": "Beijing", "Russia": "Moscow",
    "Egypt": "Cairo", "Greece": "Athens", "Ireland": "Dublin", "Austria": "Vienna",
    "Hungary": "Budapest", "Poland": "Warsaw", "Norway": "Oslo", "Sweden": "Stockholm",
    "Finland": "Helsinki", "Denmark": "Copenhagen", "Belgium": "Brussels", "Peru": "Lima",
    "Chile": "Santiago", "Argentina": "Buenos Aires", "Colombia": "Bogota", "Cuba": "Havana",
    "Mexico": "Mexico City", "Canada": "Ottawa", "Kenya": "Nairobi", "Ethiopia": "Addis Ababa",
    "Thailand": "Bangkok", "Vietnam": "Hanoi", "Indonesia": "Jakarta", "Philippines": "Manila",
    "South Korea": "Seoul", "India": "New Delhi", "Pakistan": "Islamabad", "Iran": "Tehran",
    "Iraq": "Baghdad", "Turkey": "Ankara", "Ukraine": "Kyiv", "Romania": "Bucharest",
    "Bulgaria": "Sofia", "Serbia": "Belgrade", "Croatia": "Zagreb", "Czechia": "Prague",
    "Slovakia": "Bratislava", "Switzerland": "Bern", "Netherlands": "Amsterdam",
    "Australia": "Canberra", "New Zealand": "Wellington", "Brazil": "Brasilia",
    "Venezuela": "Caracas", "Ecuador": "Quito", "Bolivia": "La Paz", "Uruguay": "Montevideo",
    "Morocco": "Rabat", "Tunisia": "Tunis", "Algeria": "Algiers", "Nigeria": "Abuja",
    "Ghana": "Accra", "Senegal": "Dakar", "Saudi Arabia": "Riyadh", "Syria": "Damascus",
    "Lebanon": "Beirut", "Jordan": "Amman", "Afghanistan": "Kabul", "Nepal": "Kathmandu",
    "Bangladesh": "Dhaka", "Malaysia": "Kuala Lumpur", "Singapore": "Singapore",
    "Iceland": "Reykjavik", "Latvia": "Riga", "Lithuania": "Vilnius", "Estonia": "Tallinn",
    "Scotland": "Edinburgh", "Wales": "Cardiff", "England": "London",
}  # fmt: skip
ANTONYMS = {
    "hot": "cold", "big": "small", "fast": "slow", "up": "down", "open": "closed",
    "happy": "sad", "light": "dark", "old": "young", "rich": "poor", "strong": "weak",
    "early": "late", "empty": "full", "hard": "soft", "high": "low", "long": "short",
    "wet": "dry", "true": "false", "win": "lose", "love": "hate", "buy": "sell",
    "push": "pull", "inside": "outside", "before": "after", "day": "night", "north": "south",
    "east": "west", "left": "right", "first": "last", "thick": "thin", "heavy": "light",
    "clean": "dirty", "loud": "quiet", "safe": "dangerous", "cheap": "expensive",
    "easy": "difficult", "wide": "narrow", "deep": "shallow", "near": "far",
    "friend": "enemy", "question": "answer", "start": "finish", "always": "never",
    "accept": "reject", "arrive": "leave", "asleep": "awake", "begin": "end",
    "brave": "cowardly", "correct": "wrong", "cool": "warm", "good": "bad",
    "sweet": "sour", "smooth": "rough", "sharp": "dull", "tall": "short", "major": "minor",
    "maximum": "minimum", "entrance": "exit", "increase": "decrease", "import": "export",
    "future": "past", "male": "female", "positive": "negative", "remember": "forget",
    "victory": "defeat", "wild": "tame", "polite": "rude", "noisy": "quiet",
    "visible": "invisible", "possible": "impossible", "legal": "illegal",
}  # fmt: skip
NAMES = (
    "Ana", "Ben", "Carla", "David", "Elena", "Farid", "Grace", "Hugo", "Ines", "Jonas",
    "Kira", "Liam", "Maya", "Noah", "Olga", "Pablo", "Quinn", "Rosa", "Sven", "Tara",
    "Umar", "Vera", "Wen", "Ximena", "Yusuf", "Zoe",
)  # fmt: skip
SENTENCES = (
    "{name} is {age} years old.",
    "My neighbour {name} turned {age} last week.",
    "At {age}, {name} still runs every morning.",
    "{name}, aged {age}, lives by the sea.",
)
MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip


def _message(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def items(task: str) -> list[tuple[str, str]]:
    """Every (prompt text, answer) of ``task``, in a fixed order."""
    if task == "add":
        return [
            (f"What is {a} + {b}? Answer with the number only.", str(a + b))
            for a in range(10, 100)
            for b in range(10, 100)
        ]
    if task == "multiply":
        return [
            (f"What is {a} times {b}? Answer with the number only.", str(a * b))
            for a in range(2, 13)
            for b in range(2, 21)
        ]
    if task == "date":
        return [
            (
                f"Write {MONTHS[m - 1]} {d}, {y} as YYYY-MM-DD. Answer with the date only.",
                f"{y:04d}-{m:02d}-{d:02d}",
            )
            for y in range(1990, 2031)
            for m in range(1, 13)
            for d in (1, 5, 9, 14, 18, 23, 28)
        ]
    if task == "capital":
        return [
            (f"What is the capital of {c}? Answer with the city name only.", city)
            for c, city in CAPITALS.items()
        ]
    if task == "antonym":
        return [
            (f'What is the opposite of "{w}"? Answer with one word.', o)
            for w, o in ANTONYMS.items()
        ]
    if task == "json":
        return [
            (
                "Extract the name and the age from this sentence: "
                + SENTENCES[(i + age) % len(SENTENCES)].format(name=name, age=age)
                + ' Reply with a JSON object only, with the keys "name" and "age".',
                json.dumps({"name": name, "age": age}),
            )
            for i, name in enumerate(NAMES)
            for age in range(18, 81, 3)
        ]
    raise ValueError(f"unknown task {task!r}; the tasks are {TUNING + HELD_OUT}")


def splits(task: str, n_train: int = 512) -> dict[str, list[dict]]:
    """``{"train": rows, "heldout": rows}``: disjoint draws of the task's items.

    The held-out split is ``N_HELD_OUT`` items (a quarter of a smaller task's), the training
    split at most ``n_train`` of the rest.
    """
    pool = items(task)
    random.Random(task).shuffle(pool)
    n_held = min(N_HELD_OUT, len(pool) // 4)
    held, train = pool[:n_held], pool[n_held:][:n_train]

    def rows(part: list[tuple[str, str]]) -> list[dict]:
        return [{"prompt": _message(q), "answer": a, "task": task} for q, a in part]

    return {"train": rows(train), "heldout": rows(held)}
