"""The serving GPUs, as far as preflight needs them: their name and compute capability (SM).

They come from the serving host (``--ssh``: the probe asks ``nvidia-smi``, or the driver's
``/proc/driver/nvidia/gpus/*/information``; the answer is hostile data, bounded here) or from ``--gpu NAME``
(a product name mapped to its SM by :data:`KNOWN`, or ``sm90`` / ``9.0`` written directly).  Unknown: None,
and the rules that depend on the GPU say under which GPUs they hold.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sgpatch.errors import SgpatchError

MAX_GPUS = 64
MAX_NAME = 120

# Data-centre and workstation GPUs a launch meets, by the name nvidia-smi prints (without "NVIDIA"), and SM.
KNOWN: Mapping[str, int] = {
    "V100": 70,
    "T4": 75,
    "A100": 80,
    "A800": 80,
    "A30": 80,
    "A10": 86,
    "A40": 86,
    "A6000": 86,
    "L4": 89,
    "L20": 89,
    "L40": 89,
    "L40S": 89,
    "RTX 4090": 89,
    "H100": 90,
    "H800": 90,
    "H200": 90,
    "H20": 90,
    "GH200": 90,
    "B200": 100,
    "GB200": 100,
    "B300": 103,
    "GB300": 103,
    "RTX 5090": 120,
    "RTX PRO 6000": 120,
}


class GpuError(SgpatchError):
    """A ``--gpu`` value sgpatch cannot map to a compute capability (exit 2)."""


@dataclass(frozen=True, slots=True)
class Gpu:
    name: str
    sm: int
    """Compute capability as SGLang's ``is_smNN_supported`` writes it: 9.0 -> 90, 10.0 -> 100."""


@dataclass(frozen=True, slots=True)
class Gpus:
    gpus: tuple[Gpu, ...]
    source: str
    """``--gpu H200``, ``host: nvidia-smi``, ``host: /proc/driver/nvidia``."""

    @property
    def shown(self) -> str:
        kinds = dict.fromkeys(f"{g.name} (SM{g.sm})" for g in self.gpus)
        return ", ".join(kinds) + f" [{self.source}]"


def _normal(name: str) -> str:
    return " ".join(re.findall(r"[A-Za-z0-9]+", name)).upper()


def known_sm(name: str) -> int | None:
    """The SM of a product name (``NVIDIA H200``, ``H100 80GB HBM3``, ``A100-SXM4-80GB``); None: not known."""
    text = _normal(name)
    for key in sorted(KNOWN, key=len, reverse=True):
        if re.search(rf"(?<![A-Z0-9]){re.escape(_normal(key))}(?![A-Z0-9])", text):
            return KNOWN[key]
    return None


def _cap(text: str) -> int | None:
    found = re.fullmatch(r"\s*(?:sm_?)?(\d{1,3})(?:\.(\d))?\s*", text, re.IGNORECASE)
    if found is None:
        return None
    major, minor = found.groups()
    if minor is None:  # sm90 / sm100 / sm120
        value = int(major)
        return value if value >= 10 else None
    return int(major) * 10 + int(minor)


def gpu_option(value: str) -> Gpus:
    """``--gpu NAME``: a known product name or ``sm90`` / ``9.0``."""
    sm = known_sm(value) if not re.fullmatch(r"\s*(?:sm_?)?[\d.]+\s*", value, re.IGNORECASE) else _cap(value)
    if sm is None:
        raise GpuError(
            f"--gpu {value[:60]!r}: not a GPU sgpatch knows",
            hint="name it as nvidia-smi does (" + ", ".join(list(KNOWN)[2:12]) + ", ...) or give its SM (sm90, 10.0)",
        )
    return Gpus((Gpu(value.strip()[:MAX_NAME], sm),), f"--gpu {value.strip()[:MAX_NAME]}")


def gpus_answer(answer: Any, host: str) -> Gpus | None:
    """The probe's ``gpus`` answer (hostile): each GPU's name and compute capability; None when the host
    reported none or the answer is not understood (the rules then say under which GPUs they hold)."""
    if not isinstance(answer, dict) or not isinstance(answer.get("gpus"), list):
        return None
    out = []
    for entry in answer["gpus"][:MAX_GPUS]:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            return None
        name = "".join(c for c in entry["name"][:MAX_NAME] if c.isprintable())
        cap = entry.get("compute_cap")
        sm = _cap(cap) if isinstance(cap, str) and len(cap) <= 8 else None
        sm = sm if sm is not None else known_sm(name)
        if sm is None:
            return None
        out.append(Gpu(name, sm))
    source = answer.get("source")
    return Gpus(tuple(out), f"{host}: {source if isinstance(source, str) else 'probe'}"[:200]) if out else None
