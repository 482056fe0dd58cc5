r"""LoRA adapters through ``peft``: the policy W + (α/r) B A, the reference W, one model.

    π_θ:   h = W x + (α/r) · B A · dropout(x),   θ = {A, B} per target module (W frozen)
    π_ref: h = W x                                (the same model, adapters disabled)

B starts at 0 (peft's default), so π_θ = π_ref at the start, as a full fine-tune's frozen copy
would be, without holding a second copy of the weights: :class:`AdaptersOff` runs the model
under ``peft``'s ``disable_adapter()``. Only A and B are trained, so only they (and Adam's
moments of them) are checkpointed (:func:`checkpointed`); ``export`` writes the adapter
directory (``adapter_config.json`` + ``adapter_model.safetensors``, loaded with
``PeftModel.from_pretrained``) or, with ``--merge``, the merged weights W + (α/r) B A as a
plain ``transformers`` model (:func:`merged`).

The dropout is peft's, applied to the adapters' input in the gradient pass only: the sampler
and the reference run in eval mode, as the rest of the model always does (the log-probs the
sampler records must be the policy's); TRL trains with the model in train mode.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from eligibility._output import cut

if TYPE_CHECKING:
    from peft import LoraConfig

TINY_TARGETS = ("qkv", "proj")
"""The built-in tiny transformer's attention maps, its default targets (peft has no entry
for it; a Hugging Face model's default is peft's own for its ``model_type``)."""

_SAME_MATH = {"bias": "none", "use_rslora": False, "use_dora": False, "modules_to_save": None}
"""LoraConfig settings a run records no field for: only these values are accepted."""


def _peft(option: str) -> Any:
    try:
        import peft
    except ModuleNotFoundError:
        raise ValueError(
            f"{option}: LoRA adapters need peft; install it with pip install 'eligibility[lm]'"
        ) from None
    return peft


def fields_of(peft_config: LoraConfig) -> dict[str, Any]:
    """The run's LoRA fields (``lora_r``, …) of a ``peft.LoraConfig`` given from Python.

    Raises:
        ValueError: not a LoraConfig, or one with settings the run cannot record (a bias,
            rsLoRA, DoRA, modules to save), naming them.
    """
    peft = _peft("peft_config=")
    if not isinstance(peft_config, peft.LoraConfig):
        raise ValueError(
            f"peft_config= must be a peft.LoraConfig, got {type(peft_config).__name__}"
        )
    other = {
        k: getattr(peft_config, k) for k, v in _SAME_MATH.items() if getattr(peft_config, k) != v
    }
    if other:
        raise ValueError(
            f"peft_config=: {other} is not supported here; finetune trains plain LoRA "
            f"({', '.join(f'{k}={v!r}' for k, v in _SAME_MATH.items())})"
        )
    targets = peft_config.target_modules
    if isinstance(targets, str):
        targets = (targets,)
    return {
        "lora_r": int(peft_config.r),
        "lora_alpha": float(peft_config.lora_alpha),
        "lora_dropout": float(peft_config.lora_dropout),
        "lora_target_modules": tuple(sorted(targets or ())),
    }


def wrap(
    model: nn.Module,
    *,
    r: int,
    alpha: float,
    dropout: float,
    targets: tuple[str, ...],
    seed: int = 0,
) -> nn.Module:
    """``model`` with LoRA adapters of rank ``r`` on ``targets`` (peft's ``get_peft_model``).

    A is drawn by peft's initialiser from ``seed`` (the caller's global RNG left as it was),
    B is 0.

    Raises:
        ValueError: the targets name no module of the model (or the model has no default).
    """
    peft = _peft("--lora-r")
    hf = hasattr(model, "config") and hasattr(model, "save_pretrained")
    chosen: list[str] | str | None = list(targets) or (None if hf else list(TINY_TARGETS))
    if chosen == ["all-linear"]:
        chosen = "all-linear"
    config = peft.LoraConfig(
        r=r,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=chosen,
        task_type="CAUSAL_LM" if hf else None,
    )
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            # peft reads transformers' deprecated `is_gradient_checkpointing`: not the user's
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
            torch.manual_seed(seed)
            wrapped = peft.get_peft_model(model, config)
    except ValueError as err:
        first = (str(err).strip().splitlines() or ["no such module"])[0][:200]
        if "not found in the base model" in first:  # peft's words for a name that matched none
            linear = sorted({_end(n) for n, _ in _linear(model)})
            first = f"no module of the model is named so (its linear layers: {', '.join(linear)})"
        raise ValueError(
            f"--lora-target-modules {cut(' '.join(targets)) or '(default)'}: {first}; name "
            "modules of the model (e.g. q_proj v_proj), or all-linear"
        ) from None
    wrapped.eval()
    return wrapped


def _linear(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's linear layers by name (what LoRA adapters can wrap)."""
    return [(n, m) for n, m in model.named_modules() if isinstance(m, nn.Linear) and n]


def _end(name: str) -> str:
    """How peft's names match a module: its last part (with its parent's for an index)."""
    parts = name.split(".")
    return ".".join(parts[-2:] if parts[-1].isdigit() else parts[-1:])


def is_lora(model: nn.Module) -> bool:
    """Whether ``model`` is a ``peft`` model (LoRA adapters on a frozen base)."""
    # peft's class, or FSDP's subclass of it (``fully_shard`` makes one)
    return any(c.__module__.startswith("peft.") for c in type(model).__mro__)


class AdaptersOff(nn.Module):
    """The reference policy: the LoRA model's forward with its adapters disabled.

    Holds no weights of its own (the model is kept out of the module tree, so nothing here is
    registered, copied or frozen).
    """

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.__dict__["policy"] = model
        self.eval()

    def forward(self, **kw: object) -> Any:
        """The model's output with every adapter off."""
        with self.policy.disable_adapter():
            return self.policy(**kw)


def reference(model: nn.Module) -> nn.Module:
    """The frozen reference of the KL: adapters off (LoRA) or a frozen copy of the weights."""
    if is_lora(model):
        return AdaptersOff(model)
    import copy

    return copy.deepcopy(model).requires_grad_(False)


@contextlib.contextmanager
def dropout_on(model: nn.Module) -> Iterator[None]:
    """The adapters' dropout active inside (the gradient pass); the model stays in eval."""
    layers = [m for n, m in model.named_modules() if n.endswith("lora_dropout.default")]
    for m in layers:
        m.train()
    try:
        yield
    finally:
        for m in layers:
            m.eval()


def checkpointed(model: nn.Module) -> dict[str, torch.Tensor]:
    """The tensors a checkpoint holds: the trainable ones (the adapters'), or every weight.

    Under LoRA only the adapters change, so only they are saved (with the optimiser's state of
    them, which is all the optimiser has); a full fine-tune saves the model's ``state_dict``.
    """
    if is_lora(model):
        return {k: p for k, p in model.named_parameters() if p.requires_grad}
    return dict(model.state_dict())


def exportable(model: nn.Module) -> bool:
    """Whether the policy has a Hugging Face format (the base model, under LoRA)."""
    base = model.get_base_model() if is_lora(model) else model
    return hasattr(base, "save_pretrained")


def merged(model: nn.Module) -> nn.Module:
    """The model with W + (α/r) B A written into its weights, adapters gone (peft's merge).

    Raises:
        ValueError: not a LoRA model.
    """
    if not is_lora(model):
        raise ValueError("export --merge: the run trained every weight; there is no adapter")
    return model.merge_and_unload()


@contextlib.contextmanager
def perturbed(model: nn.Module, seed: int = 0) -> Iterator[None]:
    """Every adapter's B drawn away from zero inside, put back bit for bit after.

    A fresh adapter has B = 0, so s B A x vanishes and a forward that misreads the adapters
    (their scaling, dropout's placement, a variant) computes the base model's function exactly
    as peft's does: a hold on it would see nothing. Inside, each B is N(0, 0.02²) from a
    generator of its own (the run's random state is not touched); outside, the original B.
    """
    layers = [m for n, m in model.named_modules() if "lora_B" in n and isinstance(m, nn.Linear)]
    saved = [m.weight.detach().clone() for m in layers]
    gen = torch.Generator().manual_seed(seed)
    try:
        with torch.no_grad():
            for m in layers:
                noise = torch.randn(m.weight.shape, generator=gen, dtype=torch.float32)
                m.weight.copy_(0.02 * noise)
        yield
    finally:
        with torch.no_grad():
            for m, w in zip(layers, saved, strict=True):
                m.weight.copy_(w)


Adapter = tuple[nn.Linear, nn.Linear, float, nn.Module]
"""One adapter of a map: (A, B, s, dropout), its term s · B A dropout(x)."""


def terms(module: nn.Module) -> tuple[nn.Linear, list[Adapter]] | None:
    """What a linear map computes, h = W x + b + Σ s B A dropout(x): its W, b and its adapters.

    A plain ``nn.Linear`` is itself with no adapter; a ``peft`` LoRA ``Linear`` is its base
    layer with the (A, B, s = α/r, dropout) of each active adapter (none while they are
    disabled, as the reference runs). None for anything else, a map these terms do not
    describe: a LoRA layer with its adapters merged into W, a transposed (``fan_in_fan_out``)
    or biased adapter, a variant (DoRA), another kind of layer.
    """
    if type(module) is nn.Linear:
        return module, []
    kind = type(module)
    if kind.__name__ != "Linear" or kind.__module__ != "peft.tuners.lora.layer":
        return None
    base = module.base_layer
    if (
        type(base) is not nn.Linear
        or module.merged
        or module.fan_in_fan_out
        or getattr(module, "lora_variant", {})
    ):
        return None
    if module.disable_adapters:
        return base, []
    adapters: list[Adapter] = []
    for name in module.active_adapters:
        if name not in module.lora_A:
            continue  # peft skips an active name the layer has no adapter of
        a, b, drop = module.lora_A[name], module.lora_B[name], module.lora_dropout[name]
        if type(a) is not nn.Linear or type(b) is not nn.Linear or b.bias is not None:
            return None
        if type(drop) not in (nn.Dropout, nn.Identity):
            return None
        adapters.append((a, b, float(module.scaling[name]), drop))
    return base, adapters


__all__ = [
    "TINY_TARGETS",
    "Adapter",
    "AdaptersOff",
    "checkpointed",
    "dropout_on",
    "exportable",
    "fields_of",
    "is_lora",
    "merged",
    "perturbed",
    "reference",
    "terms",
    "wrap",
]
