"""The only place git runs: ``run`` puts every question (one spawner, a scrubbed environment), ``repo`` says
what sgpatch asks, ``guard`` refuses a configuration that names a program, ``clone`` makes and moves clones."""
