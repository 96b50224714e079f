"""Resolve --device: auto | cpu | cuda | cuda:N | mps."""

from __future__ import annotations

import re

from attn_cli.plumbing.errors import BadInput, DeviceUnavailable

_DEVICE_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")


def resolve_device(spec: str) -> str:
    """The torch device string to run on. auto prefers CUDA, then MPS, then CPU."""
    import torch

    name = spec.strip().lower()
    if not _DEVICE_PATTERN.match(name):
        raise BadInput(f"unknown device {spec!r}", "use auto, cpu, cuda, cuda:N or mps")
    if name == "auto":
        if torch.cuda.is_available():
            return "cuda"
        if _mps_available(torch):
            return "mps"
        return "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise DeviceUnavailable(
                f"device {name} requested but CUDA is not available to this torch build ({torch.__version__})",
                "use --device cpu, or install a CUDA build of torch (see README)",
            )
        index = int(name.split(":")[1]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise DeviceUnavailable(
                f"device {name} requested but only {torch.cuda.device_count()} CUDA device(s) exist",
                f"use cuda:0 to cuda:{torch.cuda.device_count() - 1}",
            )
        return name
    if name == "mps" and not _mps_available(torch):
        raise DeviceUnavailable("device mps requested but MPS is not available here", "use --device cpu")
    return name


def _mps_available(torch) -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend and backend.is_available())
