"""verify: one check engine for every target (SPEC §7).

``engine.py`` checks any tree (anchors, blob checks, patch states, hunk landing) and a checkout. The
targets reach it through their own readers: a checkout directly (``verify_checkout``), a wheel through
``wheel/check.py``, an install here or on a host through ``deployed/installed.py``, which talks to the host
with the probe (``deployed/remote.py`` runs it, ``deployed/answer.py`` reads its answer), and a port's
outputs through ``port/outputs.py``.
"""
