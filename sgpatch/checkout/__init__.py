"""A git checkout of the pinned source: fetch, state, apply, verify, export, and the crash-safe move (journal)."""
