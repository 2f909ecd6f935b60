"""Throughput and MFU: :class:`StepMeter` and the transformer FLOPs helpers.

MFU = achieved FLOP/s / (peak FLOP/s per chip x chips). The peak comes from the selected
plugin's table for the detected chip (``shims.profiling.peak_flops``); an unknown chip gives
``mfu=None`` and a note saying why, never a guessed peak.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from anydevice.runtime.backend import current

if TYPE_CHECKING:
    import torch


def transformer_training_flops_per_token(n_params: int, n_layers: int, d_model: int, seq_len: int) -> float:
    """Training FLOPs per token of a decoder-only transformer (PaLM, appendix B).

    ``6 * N`` for the forward and backward matmuls over ``N`` non-embedding parameters, plus
    ``12 * L * d * T`` for attention scores and values over a context of ``T`` tokens.
    """
    return 6.0 * n_params + 12.0 * n_layers * d_model * seq_len


# The names common configs (Hugging Face, GPT-2, nanoGPT, torchtitan) use for each quantity.
_CONFIG_NAMES: dict[str, tuple[str, ...]] = {
    "n_layers": ("n_layers", "num_hidden_layers", "n_layer", "num_layers"),
    "d_model": ("d_model", "hidden_size", "n_embd", "dim"),
    "vocab_size": ("vocab_size", "padded_vocab_size"),
    "seq_len": ("seq_len", "max_position_embeddings", "n_positions", "max_seq_len", "block_size"),
    "d_ff": ("d_ff", "intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"),
    "n_heads": ("n_heads", "num_attention_heads", "n_head"),
    "n_kv_heads": ("n_kv_heads", "num_key_value_heads", "num_kv_heads"),
    "activation": ("activation", "hidden_act", "activation_function"),
}
_GATED = ("silu", "swiglu", "swish", "geglu", "reglu")


def _config_value(config: Mapping[str, Any] | object, key: str) -> Any:
    for name in _CONFIG_NAMES[key]:
        value = config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
        if value is not None:
            return value
    return None


def matmul_params_from_config(config: Mapping[str, Any] | object) -> int:
    """Parameters that take part in matmuls per token: attention, MLP and the output head.

    Embedding lookups cost no FLOPs and are left out; biases and norms are negligible. Grouped-query
    attention (``num_key_value_heads``) and gated MLPs (``hidden_act="silu"``, LLaMA-style) are
    recognised; ``d_ff`` defaults to ``4 * d_model``.
    """
    n_layers, d_model, vocab = (_config_value(config, k) for k in ("n_layers", "d_model", "vocab_size"))
    missing = [k for k, v in (("n_layers", n_layers), ("d_model", d_model), ("vocab_size", vocab)) if v is None]
    if missing:
        names = "; ".join(f"{k}: one of {', '.join(_CONFIG_NAMES[k])}" for k in missing)
        raise ValueError(f"The transformer config lacks {', '.join(missing)} (looked for {names}).")
    d, layers = int(d_model), int(n_layers)
    d_ff = int(_config_value(config, "d_ff") or 4 * d)
    heads = _config_value(config, "n_heads")
    kv_heads = _config_value(config, "n_kv_heads") or heads
    kv_dim = d * int(kv_heads) // int(heads) if heads else d
    attention = 2 * d * d + 2 * d * kv_dim  # q, o + k, v
    activation = str(_config_value(config, "activation") or "").lower()
    mlp = (3 if any(g in activation for g in _GATED) else 2) * d * d_ff
    return layers * (attention + mlp) + d * int(vocab)


def flops_per_token_from_config(config: Mapping[str, Any] | object, seq_len: int | None = None) -> float:
    """Training FLOPs per token of a decoder-only transformer described by ``config``.

    ``config`` is a mapping or an object (a Hugging Face ``PretrainedConfig`` works) with the
    usual names: ``num_hidden_layers``/``n_layer``, ``hidden_size``/``n_embd``, ``vocab_size``,
    optionally ``intermediate_size``, ``num_attention_heads``, ``num_key_value_heads``,
    ``hidden_act``. ``seq_len`` defaults to the config's context length.
    """
    context = seq_len or _config_value(config, "seq_len")
    if context is None:
        raise ValueError("No sequence length: pass seq_len= or put max_position_embeddings (or seq_len) in the config.")
    n_layers, d_model = int(_config_value(config, "n_layers")), int(_config_value(config, "d_model"))
    params = matmul_params_from_config(config)
    return transformer_training_flops_per_token(params, n_layers, d_model, int(context))


@dataclass(frozen=True)
class MeterReport:
    """What a :class:`StepMeter` measured; ``mfu`` is None when the chip's peak is unknown."""

    steps: int
    timed_steps: int
    seconds: float
    step_time_s: float | None
    tokens_per_s: float | None
    samples_per_s: float | None
    flops_per_s: float | None
    peak_flops_per_s: float | None
    chips: int
    chip: str | None
    mfu: float | None
    mfu_note: str

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly copy."""
        return asdict(self)


class StepMeter:
    """Times training steps and turns them into throughput and MFU.

    Call :meth:`step` once at the end of every step, after :func:`anydevice.step` (which ends
    the graph on lazy devices). It only counts: the device is synchronised twice in a run, when
    the timed window opens (after the ``warmup`` steps: compilation, allocator growth) and when it
    closes (:meth:`stop`, or :meth:`report`), so the loop never stalls an async or lazy device
    once a step, and the window still holds every step's device work.

    :param flops_per_step: model FLOPs of one step over all chips (e.g.
        ``flops_per_token_from_config(cfg) * tokens_per_step``); needed for MFU.
    :param chips: chips the step runs on; default: the process-group world size (one chip per process).
    :param dtype: the dtype whose peak is used (default ``torch.bfloat16``, the usual MFU convention).
    """

    def __init__(
        self,
        flops_per_step: float | None = None,
        tokens_per_step: int | None = None,
        samples_per_step: int | None = None,
        dtype: torch.dtype | None = None,
        chips: int | None = None,
        warmup: int = 1,
    ) -> None:
        if warmup < 0:
            raise ValueError("warmup must be >= 0")
        self.flops_per_step = flops_per_step
        self.tokens_per_step = tokens_per_step
        self.samples_per_step = samples_per_step
        self.dtype = dtype
        self.chips = chips
        self.warmup = warmup
        self.steps = 0
        self._opened_at_step: int | None = None  # steps done when the timed window opened
        self._opened: float | None = None
        self._closed: tuple[int, float] | None = None  # (steps, time) when stop() closed the window

    def start(self) -> None:
        """Open the timed window now, so that the first step can be timed (with ``warmup=0``).

        Without it the window opens at the end of step ``max(warmup, 1)``.
        """
        if self.warmup == 0 and self.steps == 0:
            self._open()

    def step(self) -> None:
        """End one step: count it; opens the timed window once the warm-up steps are done."""
        self.steps += 1
        if self._opened is None and self.steps >= max(self.warmup, 1):
            self._open()

    def stop(self) -> None:
        """Close the timed window (synchronising the device): later work, e.g. a final checkpoint, is not timed."""
        if self._opened is not None and self._closed is None:
            current().shims.placement.synchronize()
            self._closed = (self.steps, time.perf_counter())

    def _open(self) -> None:
        current().shims.placement.synchronize()
        self._opened, self._opened_at_step = time.perf_counter(), self.steps

    @property
    def timed_steps(self) -> int:
        """Steps inside the timed window."""
        if self._opened_at_step is None:
            return 0
        end = self._closed[0] if self._closed else self.steps
        return end - self._opened_at_step

    def _timed_seconds(self) -> float:
        if self._opened is None:
            return 0.0
        if self._closed is not None:
            return self._closed[1] - self._opened
        current().shims.placement.synchronize()
        return time.perf_counter() - self._opened

    def report(self) -> MeterReport:
        """Step time, throughput, FLOP/s and MFU over the timed steps."""
        import torch

        seconds = self._timed_seconds()
        rate = self.timed_steps / seconds if self.timed_steps and seconds > 0 else None
        backend = current()
        profiling = backend.shims.profiling
        chips = self.chips or _world_size()
        dtype = self.dtype or torch.bfloat16
        chip = profiling.chip() or backend.chip
        peak_one = profiling.peak_flops(dtype)
        flops = self.flops_per_step * rate if (rate and self.flops_per_step) else None
        if peak_one is None:
            mfu, note = None, _unknown_peak_note(chip, backend.name, backend.plugin, dtype, profiling.peak_flops(torch.bfloat16))
        elif flops is None:
            mfu = None
            note = "MFU not computed: " + ("no flops_per_step given" if not self.flops_per_step else "no timed steps")
        else:
            mfu = flops / (peak_one * chips)
            peak_text = f"{peak_one / 1e12:g} TFLOP/s ({_dtype_name(dtype)})"
            note = f"peak {peak_text} per {chip} x {chips} chip(s), from plugin {backend.plugin}"
        return MeterReport(
            steps=self.steps,
            timed_steps=self.timed_steps,
            seconds=seconds,
            step_time_s=(1 / rate) if rate else None,
            tokens_per_s=self.tokens_per_step * rate if (rate and self.tokens_per_step) else None,
            samples_per_s=self.samples_per_step * rate if (rate and self.samples_per_step) else None,
            flops_per_s=flops,
            peak_flops_per_s=peak_one * chips if peak_one else None,
            chips=chips,
            chip=chip,
            mfu=mfu,
            mfu_note=note,
        )


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _unknown_peak_note(chip: str | None, device: str, plugin: str, dtype: torch.dtype, bf16_peak: float | None) -> str:
    if chip is None:
        return f"MFU unknown: the {device} plugin ({plugin}) did not identify the chip, so it has no peak FLOP/s"
    if bf16_peak is not None:
        return f"MFU unknown: plugin {plugin} lists no {_dtype_name(dtype)} peak for {chip} (pass dtype=torch.bfloat16)"
    return f"MFU unknown: chip {chip} is not in the {device} plugin's ({plugin}) peak FLOP/s table"


def _world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
