"""A PEP 503 HTML project page read as the PEP 691 JSON document it stands for.

Many mirrors (older devpi, Nexus, Artifactory, a directory behind a plain web
server) serve only the HTML simple API.  Its page is read with the stdlib's
``html.parser`` and turned into the JSON form PEP 691 gives for the same facts
(``{"meta": ..., "files": [{"filename", "url", "hashes", "yanked", ...}]}``), so
that sgpatch.source.index checks and uses every file exactly as it does a JSON
answer: one path for pins, yanked files, names, URLs and credentials.

Each ``<a href>`` is a file: its name is the link's text (else the last segment
of its URL's path), its URL the ``href`` as written (the index resolves it
against the page URL, or the first ``<base href>`` resolved against it), its
hashes the URL's ``#<name>=<hex>`` fragment, ``data-yanked`` (PEP 592: present
means yanked, its value the reason), ``data-requires-python`` (PEP 503),
``data-core-metadata``/``data-dist-info-metadata`` (PEP 658, 714: ``true`` or
``<name>=<hex>``; ``false`` too, as JSON allows) and ``data-gpg-sig`` (``true``/``false``).  PEP 629's
``pypi:repository-version`` becomes ``meta.api-version``.

The page is hostile input: its bytes are capped by the caller (the JSON cap);
it is fed to the parser in chunks, and a construct the parser must hold whole
(a tag, a comment, a declaration) may not exceed MAX_CONSTRUCT bytes; at most
MAX_TAGS tags and MAX_LINKS links are read before it is refused.  A value of the
wrong form is refused too.  Refusals are raised through the ``bad`` the caller
gives, which names the index.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from html.parser import HTMLParser
from typing import Any

MAX_LINKS = 50_000  # files on one page (sglang's lists 412 today)
MAX_TAGS = 250_000  # start and end tags on one page (today: about 1,300)
MAX_CONSTRUCT = 64 << 10  # bytes of one tag, comment or declaration the parser holds whole
CHUNK = 8 << 10  # bytes fed to the parser at a time
_HASH = re.compile(r"^([a-z0-9_]{1,32})=([0-9A-Za-z]{1,256})$")
_VERSION = re.compile(r"^[0-9]{1,6}\.[0-9]{1,6}$")

Bad = Callable[[str], Exception]


class _Page(HTMLParser):
    """Collects the links and the page's first ``<base href>`` and repository version, within the bounds."""

    def __init__(self, bad: Bad) -> None:
        super().__init__(convert_charrefs=True)
        self.bad = bad
        self.tags = 0
        self.links: list[dict[str, str | None]] = []
        self.texts: list[list[str]] = []
        self.open_link: int | None = None
        self.base: str | None = None
        self.version: str | None = None

    def _count(self) -> None:
        self.tags += 1
        if self.tags > MAX_TAGS:
            raise self.bad(f"more than {MAX_TAGS} tags")

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._count()
        if tag == "a":
            self.open_link = None
            values = dict(attrs)  # a repeated attribute: the last one, as a dict of the JSON form would keep
            if "href" not in values:
                return
            if len(self.links) >= MAX_LINKS:
                raise self.bad(f"more than {MAX_LINKS} links")
            self.links.append(values)
            self.texts.append([])
            self.open_link = len(self.links) - 1
        elif tag == "base" and self.base is None:
            self.base = dict(attrs).get("href")
        elif tag == "meta":
            values = dict(attrs)
            if values.get("name") == "pypi:repository-version" and self.version is None:
                self.version = values.get("content") or ""

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag == "a":
            self.open_link = None

    def handle_endtag(self, tag: str) -> None:
        self._count()
        if tag == "a":
            self.open_link = None

    def handle_data(self, data: str) -> None:
        if self.open_link is not None:
            text = self.texts[self.open_link]
            if sum(map(len, text)) + len(data) > 1024:
                raise self.bad("a link's text is over 1024 characters")
            text.append(data)


def read_page(data: bytes, bad: Bad) -> dict[str, Any]:
    """The PEP 691 JSON document (as parsed JSON) that the PEP 503 page ``data`` stands for."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad(f"not UTF-8 HTML (byte {exc.start})") from None
    page = _Page(bad)
    try:
        for start in range(0, len(text), CHUNK):
            page.feed(text[start : start + CHUNK])
            if len(page.rawdata) > MAX_CONSTRUCT:  # what the parser holds unparsed
                raise bad(f"a tag, comment or declaration over {MAX_CONSTRUCT >> 10} KiB")
        page.close()
    except (AssertionError, ValueError) as exc:  # _markupbase asserts on a declaration it cannot read (<![x[)
        raise bad(f"HTML the parser cannot read ({str(exc)[:80]})") from None
    version = "1.0" if page.version is None else page.version
    if not _VERSION.match(version):
        raise bad(f"pypi:repository-version {version[:20]!r} is not a version")
    base = page.base.strip() if page.base else ""
    files = [_file(values, "".join(texts), base, bad) for values, texts in zip(page.links, page.texts, strict=True)]
    return {"meta": {"api-version": version}, "files": files}


def _file(values: dict[str, str | None], text: str, base: str, bad: Bad) -> dict[str, Any]:
    """One link as a PEP 691 file object."""
    href = (values.get("href") or "").strip()
    url, _, fragment = href.partition("#")
    name = text.strip() or urllib.parse.unquote(urllib.parse.urlsplit(url).path.rpartition("/")[2])
    where = name[:80] or href[:80]
    out: dict[str, Any] = {"filename": name, "url": urllib.parse.urljoin(base, url) if base else url}
    found = _HASH.match(fragment)  # another fragment (``#egg=...``) is no hash, as a JSON file without one
    out["hashes"] = {found[1]: found[2]} if found else {}
    if "data-requires-python" in values:
        out["requires-python"] = values["data-requires-python"]
    if "data-yanked" in values:
        out["yanked"] = values["data-yanked"] or True
    for attr, key in (("data-dist-info-metadata", "data-dist-info-metadata"), ("data-core-metadata", "core-metadata")):
        if attr in values:
            out[key] = _metadata(values[attr], f"{where!r}: {attr}", bad)
    if "data-gpg-sig" in values:
        sig = values["data-gpg-sig"]
        if sig not in ("true", "false"):
            raise bad(f"{where!r}: data-gpg-sig {str(sig)[:40]!r} is not true or false")
        out["gpg-sig"] = sig == "true"
    return out


def _metadata(value: str | None, what: str, bad: Bad) -> bool | dict[str, str]:
    """PEP 658's value: ``true``, or the metadata file's ``<hash name>=<hex digest>``."""
    if value in ("true", "false"):
        return value == "true"
    found = _HASH.match(value or "")
    if found is None:
        raise bad(f"{what} {str(value)[:80]!r} is not true or <hash name>=<hex digest>")
    return {found[1]: found[2]}
