"""What a CUDA label means for a stack: the CUDA version, the extra indexes, the install pins' local tags and
the ``Requires-Dist`` overrides, as the stacks shipped with sgpatch pin them for SGLang 0.5.9.

``init`` carries these reference pins to the release it is asked for exactly as ``port`` carries a stack's
pins to a new release (:func:`sgpatch.config.pins.port_pins`): the release's own exact pins, the label's local tags
and extras kept, renamed packages followed, an override kept only while the release asks for something else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sgpatch.config import InstallRecipe, Stack, parse_override

REFERENCE_VERSION = "0.5.9"  # the release the reference pins below are for

# The build backend of a source build, pinned so that a wheel built next year is byte-identical; checked
# against the release's own [build-system] requires.
BUILD_REQUIRES = ("setuptools==84.2.1", "setuptools-scm==10.3.4", "wheel==0.48.0")
GIT_URL = "https://github.com/sgl-project/sglang.git"


@dataclass(frozen=True, slots=True)
class CudaLabel:
    """One CUDA stack's specifics (the reference pins are those of SGLang REFERENCE_VERSION)."""

    label: str
    cuda: str
    note: str
    extra_index_urls: tuple[str, ...]
    pins: tuple[str, ...]
    requires: tuple[tuple[str, str], ...]  # Requires-Dist overrides: (project, requirement)

    def reference_stack(self) -> Stack:
        """The label's reference pins as the stack ``port`` would carry them from."""
        return Stack(
            name=f"{REFERENCE_VERSION}-{self.label}",
            sglang_version=REFERENCE_VERSION,
            tag=f"v{REFERENCE_VERSION}",
            commit=None,
            series_dir=Path("patches") / REFERENCE_VERSION,
            cuda=self.cuda,
            local_label=self.label,
            default_source="pypi",
            git_url=GIT_URL,
            pypi_commit=None,
            artifacts=(),
            files=(),
            requires=tuple(parse_override(dist, text) for dist, text in self.requires),
            install=InstallRecipe(self.extra_index_urls, self.pins, self.note),
            interface=None,
            build_requires=BUILD_REQUIRES,
        )


LABELS: dict[str, CudaLabel] = {
    "cu130": CudaLabel(
        label="cu130",
        cuda="13.0",
        note="CUDA 13.0: torch from the cu130 index, FlashInfer JIT cache for cu130, sgl-kernel built for cu130.",
        extra_index_urls=("https://download.pytorch.org/whl/cu130", "https://flashinfer.ai/whl/cu130"),
        pins=(
            "torch==2.9.1",
            "torchaudio==2.9.1",
            "sgl-kernel==0.3.21+cu130",
            "flashinfer-python==0.6.3",
            "flashinfer-cubin==0.6.3",
            "flashinfer-jit-cache==0.6.3",
            "cuda-python>=13.0,<14",
        ),
        # sglang 0.5.9 pins cuda-python 12.9; the CUDA 13 stack needs 13.x (dropped once a release asks for it)
        requires=(("cuda-python", "cuda-python>=13.0,<14"),),
    ),
    "cu128": CudaLabel(
        label="cu128",
        cuda="12.8",
        note="CUDA 12.8: the release's own pins (torch's cu128 wheels are PyPI's); no extra index needed.",
        extra_index_urls=(),
        pins=(
            "torch==2.9.1",
            "torchaudio==2.9.1",
            "sgl-kernel==0.3.21",
            "flashinfer-python==0.6.3",
            "flashinfer-cubin==0.6.3",
            "cuda-python==12.9",
        ),
        requires=(),
    ),
}
