"""The release's rules as findings.

Every rule is a function of one :class:`~sgpatch.preflight.rules.inputs.Inputs` (the launch's arguments and
environment, the models' configs and files, the release's facts) returning its findings; :mod:`.registry`
lists them in report order and runs them.  ``spec_release`` reads the speculative handler the ``spec`` rule
mirrors.
"""
