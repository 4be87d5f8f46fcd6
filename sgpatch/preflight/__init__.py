"""Launch preflight (SPEC §14): from the launch command, the models' config files and the stack's own SGLang
release, every failure SGLang would raise only after the target's weights load, and the silent ones.

``findings.py`` holds the shared types; ``release.py`` reads SGLang's rules (data) from the stack's checkout
with ``ast``; ``mirror.py`` holds SGLang's logic mirrored (held to upstream's own functions by differential
tests); ``launch.py`` parses the launch command; ``models.py`` finds and reads a model's files (bounded,
hostile data); the rule modules turn them into findings; ``run.py`` puts one report together.
"""
