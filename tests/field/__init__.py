"""Fixed bugs of public RL trainers, ported into ``eligibility check``'s forms (see cases.py)."""
