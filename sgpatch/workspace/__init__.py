"""The team's own project: ``init`` starts one (VERSIONS.toml, an empty series, the pre-commit config),
``status`` says where each of its stacks stands.  Rooms: ``labels`` (what a CUDA label pins), ``init``,
``hooks`` (the pre-commit config), ``status``."""

from __future__ import annotations
