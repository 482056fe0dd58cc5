"""The real-model kit's tasks: conversational prompts with answers, a tuning and a held-out split.

Eight small tasks of the kinds people fine-tune small instruct models for, three to choose
defaults on (``TUNING``) and five kept apart to validate and race them (``HELD_OUT``):

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
- ``plural`` (held out, a word's form in a set sentence): 'What is the plural of "mouse"? Answer
  in the form: The plural of "mouse" is "...".' → ``The plural of "mouse" is "mice".``
- ``compare`` (held out, yes or no): "Is 47 greater than 74? Answer yes or no." → ``no``

``plural`` and ``compare`` were added after the defaults were chosen, never tuned on; they were
chosen as the candidates on which the kit's SmolLM2-135M-Instruct is right at the start on
between about 5% and 60% of the held-out split (greedy, ``lm_real_kit.py --accuracy``), so that
its samples are sometimes right and there is room to learn. On ``compare`` a constant "no" is
right on about half of the items.

Each task has a ``train`` split and a ``heldout`` split of items never in ``train`` (other
number pairs, dates, countries, words, nouns). Rows are TRL's conversational format plus the
columns the rewards read: ``{"prompt": [{"role": "user", "content": …}], "answer": …, "task": …}``.
Deterministic: the splits are drawn from ``random.Random(task name)``.
"""

from __future__ import annotations

import json
import random

TUNING = ("add", "date", "capital")
HELD_OUT = ("multiply", "json", "antonym", "plural", "compare")
T_MAX = {"add": 8, "date": 12, "capital": 8, "multiply": 8, "json": 24, "antonym": 8,
         "plural": 16, "compare": 8}  # fmt: skip
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
PLURALS = {
    # irregular, unchanged, Latin and Greek
    "man": "men", "woman": "women", "child": "children", "tooth": "teeth", "foot": "feet",
    "mouse": "mice", "goose": "geese", "ox": "oxen", "person": "people", "louse": "lice",
    "sheep": "sheep", "deer": "deer", "moose": "moose", "series": "series",
    "species": "species", "aircraft": "aircraft", "cactus": "cacti", "fungus": "fungi",
    "nucleus": "nuclei", "radius": "radii", "stimulus": "stimuli", "alumnus": "alumni",
    "crisis": "crises", "thesis": "theses", "analysis": "analyses",
    "hypothesis": "hypotheses", "axis": "axes", "oasis": "oases", "diagnosis": "diagnoses",
    "parenthesis": "parentheses", "phenomenon": "phenomena", "criterion": "criteria",
    "bacterium": "bacteria", "vertebra": "vertebrae", "larva": "larvae",
    # -f and -fe
    "knife": "knives", "wife": "wives", "life": "lives", "leaf": "leaves", "loaf": "loaves",
    "wolf": "wolves", "calf": "calves", "half": "halves", "shelf": "shelves",
    "thief": "thieves", "elf": "elves", "self": "selves", "sheaf": "sheaves", "roof": "roofs",
    "chief": "chiefs", "cliff": "cliffs", "belief": "beliefs", "chef": "chefs",
    "proof": "proofs", "giraffe": "giraffes", "safe": "safes",
    # -o
    "potato": "potatoes", "tomato": "tomatoes", "hero": "heroes", "echo": "echoes",
    "veto": "vetoes", "torpedo": "torpedoes", "piano": "pianos", "photo": "photos",
    "radio": "radios", "zoo": "zoos", "video": "videos", "kangaroo": "kangaroos",
    "studio": "studios", "memo": "memos", "solo": "solos", "logo": "logos",
    "casino": "casinos", "taco": "tacos", "patio": "patios", "rodeo": "rodeos",
    # -y
    "city": "cities", "baby": "babies", "party": "parties", "story": "stories",
    "lady": "ladies", "country": "countries", "family": "families", "puppy": "puppies",
    "berry": "berries", "cherry": "cherries", "fly": "flies", "spy": "spies",
    "army": "armies", "body": "bodies", "library": "libraries", "battery": "batteries",
    "factory": "factories", "candy": "candies", "enemy": "enemies", "jelly": "jellies",
    "sky": "skies", "duty": "duties", "hobby": "hobbies", "daisy": "daisies",
    "pony": "ponies", "diary": "diaries", "memory": "memories",
    "university": "universities", "company": "companies", "boy": "boys", "day": "days",
    "key": "keys", "toy": "toys", "monkey": "monkeys", "valley": "valleys",
    "donkey": "donkeys", "turkey": "turkeys", "tray": "trays", "ray": "rays",
    "chimney": "chimneys", "journey": "journeys", "holiday": "holidays",
    "highway": "highways", "essay": "essays",
    # -s, -x, -z, -ch, -sh
    "bus": "buses", "glass": "glasses", "box": "boxes", "fox": "foxes",
    "church": "churches", "watch": "watches", "brush": "brushes", "dish": "dishes",
    "kiss": "kisses", "class": "classes", "dress": "dresses", "wish": "wishes",
    "bench": "benches", "beach": "beaches", "match": "matches", "lunch": "lunches",
    "bush": "bushes", "tax": "taxes", "quiz": "quizzes", "buzz": "buzzes",
    "witness": "witnesses", "address": "addresses", "boss": "bosses",
    "sandwich": "sandwiches", "peach": "peaches", "coach": "coaches",
    "ostrich": "ostriches", "flash": "flashes", "branch": "branches", "inch": "inches",
    "switch": "switches", "princess": "princesses", "business": "businesses",
    "virus": "viruses", "bonus": "bonuses", "campus": "campuses", "circus": "circuses",
    # regular
    "cat": "cats", "dog": "dogs", "book": "books", "tree": "trees", "car": "cars",
    "house": "houses", "apple": "apples", "bird": "birds", "chair": "chairs",
    "table": "tables", "river": "rivers", "mountain": "mountains", "door": "doors",
    "window": "windows", "cup": "cups", "pen": "pens", "girl": "girls",
    "friend": "friends", "teacher": "teachers", "student": "students",
    "flower": "flowers", "garden": "gardens", "horse": "horses", "cow": "cows",
    "bottle": "bottles", "computer": "computers", "phone": "phones", "lamp": "lamps",
    "ship": "ships", "train": "trains", "road": "roads", "bridge": "bridges",
    "castle": "castles", "king": "kings", "queen": "queens", "song": "songs",
    "star": "stars", "cloud": "clouds", "lake": "lakes", "island": "islands",
    "forest": "forests", "egg": "eggs", "cake": "cakes", "shoe": "shoes", "hat": "hats",
    "coat": "coats", "shirt": "shirts", "sock": "socks", "glove": "gloves",
    "ring": "rings", "clock": "clocks", "bed": "beds", "room": "rooms", "wall": "walls",
    "street": "streets", "town": "towns", "village": "villages", "farm": "farms",
    "shop": "shops", "bank": "banks", "school": "schools", "doctor": "doctors",
    "nurse": "nurses", "pilot": "pilots", "farmer": "farmers", "singer": "singers",
    "lion": "lions", "tiger": "tigers", "bear": "bears", "snake": "snakes",
    "frog": "frogs", "rabbit": "rabbits", "duck": "ducks", "spider": "spiders",
    "whale": "whales", "shark": "sharks", "eagle": "eagles", "ant": "ants", "bee": "bees",
    "pencil": "pencils", "desk": "desks", "map": "maps", "ticket": "tickets",
    "letter": "letters", "idea": "ideas", "problem": "problems", "planet": "planets",
    "rocket": "rockets", "banana": "bananas", "orange": "oranges", "lemon": "lemons",
    "carrot": "carrots", "onion": "onions", "plate": "plates", "spoon": "spoons",
    "fork": "forks", "bowl": "bowls", "pillow": "pillows", "blanket": "blankets",
    "candle": "candles", "mirror": "mirrors", "camera": "cameras", "guitar": "guitars",
    "drum": "drums", "violin": "violins", "game": "games", "ball": "balls", "kite": "kites",
    "boat": "boats", "plane": "planes", "truck": "trucks", "bicycle": "bicycles",
    "wheel": "wheels",
}  # fmt: skip
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
    if task == "plural":
        return [
            (
                f'What is the plural of "{w}"? Answer in the form: The plural of "{w}" is "...".',
                f'The plural of "{w}" is "{p}".',
            )
            for w, p in PLURALS.items()
        ]
    if task == "compare":
        return [
            (f"Is {a} greater than {b}? Answer yes or no.", "yes" if a > b else "no")
            for a in range(10, 100)
            for b in range(10, 100)
            if a != b
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
