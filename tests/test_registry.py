"""The registry: every distribution has every kernel and check, and the dispatcher knows no
distribution by name."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import eligibility
from eligibility import api
from eligibility.distributions import REGISTRY, DistributionSpec, Form

KERNELS = ("log_prob", "score", "entropy", "entropy_grad", "fisher")
CHECKS = ("choose_form", "check_params", "check_value", "check_entropy_grad", "check_fisher")


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_distribution_has_every_kernel_and_check(name: str) -> None:
    spec = REGISTRY[name]
    assert isinstance(spec, DistributionSpec) and spec.name == name
    assert spec.forms, f"{name} has no parametrisation"
    for form_name, form in spec.forms.items():
        assert isinstance(form, Form)
        assert form.params and set(form.params) <= set(spec.parameters), form_name
        for op in KERNELS:
            kernel = getattr(form, op)
            assert callable(kernel), f"{name}.{form_name}.{op}"
            # each kernel is a function object of the distribution's own module (or a
            # wrapper of one), not a name built at run time
            inner = getattr(kernel, "__wrapped__", kernel)
            assert inspect.getmodule(inner).__name__.startswith("eligibility.distributions")
    for check in CHECKS:
        assert callable(getattr(spec, check)), f"{name}.{check}"
    assert spec.param_event_dims in (0, 1) and spec.value_event_dims in (0, 1)
    assert spec.support and spec.min_compute_dtype in ("float32", "float64")
    assert (spec.count_param is None) == (spec.check_count is None)


def test_the_public_names_follow_the_registry() -> None:
    assert api.DISTRIBUTIONS == tuple(REGISTRY) == eligibility.DISTRIBUTIONS
    assert api.PARAMETERS == {k: v.parameters for k, v in REGISTRY.items()}


def test_the_dispatcher_names_no_distribution_and_builds_no_kernel_name() -> None:
    source = Path(api.__file__).read_text(encoding="utf-8")
    code = "\n".join(
        line for line in source.splitlines() if not line.lstrip().startswith(("#", '"', "``"))
    )
    body = code.split('"""', 2)[-1]  # past the module docstring
    for name in REGISTRY:
        assert not re.search(rf'"{name}"', body), name
    assert not re.search(r'getattr\([^)]*f"', body)  # no kernel found by a built name
