"""Shared test settings: hypothesis profiles.

``HYPOTHESIS_PROFILE=thorough pytest ...`` runs many more examples than the default, which
is sized to keep the whole suite fast on a 2-core machine.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# deadline=None: the first call of a torch op is slow (lazy initialisation), not the code.
settings.register_profile(
    "default",
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.register_profile("quick", max_examples=5, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
