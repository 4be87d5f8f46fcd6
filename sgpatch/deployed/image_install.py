"""verify --image: the sglang installed in a container image, checked as ``verify --installed`` checks one.

The image is read as data (``sgpatch.deployed.image``): nothing runs, no daemon is
asked.  Its sglang is found by its ``.dist-info`` below any ``site-packages`` or
``dist-packages`` directory; the RECORD check hashes the files the layers left,
as the probe hashes the files on a host; and the same check as for an install
(``sgpatch.deployed.installed.examine_install``) runs on the answer this module
gives in the probe's stead.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Mapping, Sequence
from email.parser import BytesHeaderParser
from posixpath import normpath
from typing import TYPE_CHECKING, Any

from sgpatch.deployed.answer import InstalledDist, ProbeResult, RecordCheck, printable
from sgpatch.deployed.image import Image, read_image
from sgpatch.deployed.image_layers import LayerFile, sglang_path
from sgpatch.deployed.installed import DIST_NAME, examine_install, wanted_files
from sgpatch.deployed.target import Target
from sgpatch.errors import ArchiveError
from sgpatch.project import Project
from sgpatch.verify.engine import VerifyReport

if TYPE_CHECKING:
    from sgpatch.cache import Cache

_PYTHON = re.compile(r"/python(\d+\.\d+)/(?:site|dist)-packages$")
_RECORD_ROWS = 500_000


def _sha256_row(hexdigest: str) -> str:
    import base64

    return "sha256=" + base64.urlsafe_b64encode(bytes.fromhex(hexdigest)).rstrip(b"=").decode()


def _text(found: LayerFile | None) -> str | None:
    if found is None or found.data is None:
        return None
    return found.data.decode("utf-8", errors="replace")


class ImageInstall:
    """An image's sglang, answering as the probe answers (``inspect``, ``read``) from the bytes the layers left."""

    imported: tuple[str, ...] = ()  # nothing runs: nothing is imported

    def __init__(self, image: Image) -> None:
        self.image = image
        infos = sorted(
            (site, rel.split("/", 1)[0])
            for path in image.files
            if (found := sglang_path(path)) is not None
            for site, rel in [found]
            if rel.endswith(".dist-info/METADATA") and rel.count("/") == 1
        )
        self.site: str | None = infos[0][0] if infos else None
        self.dist_info: str | None = infos[0][1] if infos else None
        self.others = [f"/{site}" for site, _ in infos[1:]]

    def _file(self, rel: str) -> LayerFile | None:
        return self.image.files.get(f"{self.site}/{rel}")

    def _record(self) -> RecordCheck:
        text = _text(self._file(f"{self.dist_info}/RECORD"))
        if text is None:
            return RecordCheck(present=False, paths=(), modified=(), missing=(), unhashed=0)
        paths: list[str] = []
        modified: list[str] = []
        missing: list[str] = []
        unhashed = 0
        for row in csv.reader(text.splitlines()[:_RECORD_ROWS]):
            if not row:
                continue
            paths.append(row[0])
            recorded = row[1] if len(row) > 1 else ""
            full = normpath(f"{self.site}/{row[0]}")
            if not recorded or not recorded.startswith("sha256=") or sglang_path(full) is None:
                unhashed += 1  # no hash, another algorithm, or a file outside sglang's (never read)
                continue
            found = self.image.files.get(full)
            if found is None or found.sha256 is None:
                missing.append(row[0])
            elif _sha256_row(found.sha256) != recorded:
                modified.append(row[0])
        return RecordCheck(
            present=True, paths=tuple(paths), modified=tuple(modified), missing=tuple(missing), unhashed=unhashed
        )

    def _dist(self, want: Mapping[str, Any]) -> InstalledDist | None:
        if self.site is None or self.dist_info is None:
            return None
        raw = self._file(f"{self.dist_info}/METADATA")
        meta = BytesHeaderParser().parsebytes(raw.data if raw is not None and raw.data is not None else b"")
        version = meta.get("Version")
        if not isinstance(version, str) or not version.strip():
            raise ArchiveError(f"{self.image.label}: /{self.site}/{self.dist_info}/METADATA has no Version")
        package = f"{self.site}/{DIST_NAME}/"
        tree = sorted(
            p[len(self.site) + 1 :]
            for p, f in self.image.files.items()
            if p.startswith(package) and f.sha256 is not None and "/__pycache__/" not in p
        )
        return InstalledDist(
            name=printable(str(meta.get("Name") or DIST_NAME), 100),
            version=printable(version.strip(), 100),
            location=f"/{self.site}",
            dist_info=f"/{self.site}/{self.dist_info}",
            package_root=f"/{self.site}" if tree else None,
            shadowed=tuple(self.others),
            files={rel: self.read_one(rel) for rel in want.get("files", [])},
            meta={m: _text(self._file(f"{self.dist_info}/{m}")) for m in want.get("meta", [])},
            record=self._record() if want.get("record") else None,
            tree=tuple(tree) if want.get("tree") else None,
        )

    def read_one(self, rel: str) -> bytes | None:
        found = self._file(rel) if self.site is not None else None
        return found.data if found is not None else None

    def inspect(self, dists: Mapping[str, Mapping[str, Any]]) -> ProbeResult:
        """What the probe would answer about ``dists`` in this image (only sglang is ever there)."""
        version = _PYTHON.search(f"/{self.site}") if self.site else None
        return ProbeResult(
            target=Target(python=f"python{version[1]}" if version else "python", host=None),
            executable="not run: read from the image",
            python_version=version[1] if version else "unknown",
            environment={},
            dists={name: (self._dist(want) if name == DIST_NAME else None) for name, want in dists.items()},
            imported=(),
        )

    def read(self, dist: str, files: Sequence[str]) -> dict[str, bytes | None]:
        return {f: self.read_one(f) if dist == DIST_NAME else None for f in files}


def verify_image(project: Project, ref: str, *, cache: Cache | None = None) -> VerifyReport:
    """Verify the sglang installed in the image at ``ref`` (``PATH`` or ``PATH:TAG``), read as data."""
    image = read_image(ref, wanted=frozenset(wanted_files(project)))
    source = ImageInstall(image)
    report, _dist = examine_install(project, source, cache=cache, where=image.label)
    return report
