"""A weather service to read one number from, in TRL's ``environment_factory`` convention.

The model is asked for one figure of a city's weather ("What is the humidity in Lyon today?");
its one tool, ``weather``, answers with the city's whole report (temperature, wind, humidity,
rain), so a right reply is the asked number taken out of a longer result, not an echo of it.
One instance an episode, ``reset(**row)`` with the row's columns (the city and its four
figures). Standalone, nothing of ``eligibility`` imported: ``eligibility finetune --env
bench/lm/weather.py:Weather`` and ``GRPOTrainer(environment_factory=Weather)`` are given the same
class; the kit's ``correct`` (the reply is the number) scores both.
"""

from __future__ import annotations

FIELDS = ("temperature", "wind", "humidity", "rain")
UNITS = {"temperature": "°C", "wind": "km/h", "humidity": "%", "rain": "mm"}


class Weather:
    """Today's weather of the row's city: its report, field by field."""

    def reset(self, city: str = "", **row) -> None:
        """A new episode: the row's city and figures (nothing is appended to the prompt)."""
        self.city = city
        self.figures = {f: row[f] for f in FIELDS if f in row}

    def weather(self, city: str) -> str:
        """Today's weather report of a city.

        Args:
            city: The city's name.
        """
        if str(city).strip().lower() != self.city.lower():
            return f"No report for {city}."
        said = ", ".join(f"{f} {self.figures[f]} {UNITS[f]}" for f in FIELDS)
        return f"{self.city} today: {said}."
