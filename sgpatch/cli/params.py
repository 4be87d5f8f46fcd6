"""The parameters of the commands people run most, declared once, without typer.

typer's command (``base.register``: its signature, options and help) and the fast command line
(:mod:`sgpatch.cli.fast`) are both made from these declarations, so they cannot disagree about what a
command takes.  The shared options here are also the ones every typer command's aliases use
(``base.CheckoutOpt`` ...).  Plain classes with ``__slots__``, not dataclasses: they are made on every
start, where a dataclass costs a millisecond to define.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# what a parameter's value is: the Python type typer converts it to
KINDS = ("str", "path", "bool", "int", "float")


class Param:
    """One parameter of a command: the keyword it is passed as, its ``--flag`` (None: the positional
    argument), what its value is (KINDS), whether it may be repeated (a list), its help and metavar."""

    __slots__ = ("flag", "help", "kind", "metavar", "multiple", "name", "show_default")

    def __init__(
        self,
        *,
        name: str,
        flag: str | None,
        kind: str,
        help: str,
        multiple: bool = False,
        metavar: str | None = None,
        show_default: bool = True,
    ) -> None:
        assert kind in KINDS and not (kind == "bool" and (multiple or flag is None))
        self.name = name
        self.flag = flag
        self.kind = kind
        self.help = help
        self.multiple = multiple
        self.metavar = metavar
        self.show_default = show_default

    @property
    def default(self) -> Any:
        """What the command gets when the parameter is not given."""
        return False if self.kind == "bool" else None


class Command:
    """A command: its name on the command line, its parameters, and the module and function that run it
    (imported only when it runs, so that declaring it costs nothing)."""

    __slots__ = ("function", "module", "name", "params")

    def __init__(self, *, name: str, params: tuple[Param, ...], module: str, function: str) -> None:
        self.name = name
        self.params = params
        self.module = module
        self.function = function

    def func(self) -> Callable[..., Any]:
        """The function that runs the command (keyword arguments: one per parameter)."""
        import importlib

        return getattr(importlib.import_module(self.module), self.function)  # type: ignore[no-any-return]


STACK = Param(name="stack", flag=None, kind="str", help="stack name (default: default_stack)", show_default=False)
CONFIG = Param(
    name="config",
    flag="--config",
    kind="path",
    help="VERSIONS.toml (default: search upward from the working directory)",
)
CHECKOUT = Param(
    name="checkout", flag="--checkout", kind="path", help="checkout directory (default: .sgpatch/checkouts/STACK)"
)
JSON = Param(name="json_out", flag="--json", kind="bool", help="print one JSON document on stdout")
NO_CACHE = Param(
    name="no_cache",
    flag="--no-cache",
    kind="bool",
    help="read and keep nothing in the cache (parsed files, built wheels): all from scratch",
)
WHEEL = Param(name="wheel", flag="--wheel", kind="path", help="a built wheel to check")
INSTALLED = Param(name="installed", flag="--installed", kind="bool", help="the sglang installed for --python")
PYTHON = Param(name="python", flag="--python", kind="str", help="interpreter whose sglang to check")
SSH = Param(
    name="ssh_hosts",
    flag="--ssh",
    kind="str",
    multiple=True,
    metavar="[USER@]HOST",
    help="a serving host, over ssh (repeat it: several hosts, checked at once)",
)
HOSTS = Param(
    name="hosts",
    flag="--hosts",
    kind="path",
    metavar="FILE",
    help="the hosts to check: one per line, or an Ansible inventory (INI or YAML)",
)
LIMIT = Param(
    name="limit", flag="--limit", kind="str", metavar="PATTERN", help="only these groups or hosts of --hosts (a,b,!c)"
)
JOBS = Param(name="jobs", flag="--jobs", kind="int", metavar="N", help="hosts checked at a time (default 16)")
TIMEOUT = Param(
    name="timeout",
    flag="--timeout",
    kind="float",
    metavar="S",
    help="seconds per host, connection included (default 300 for one host, 120 each in a fleet)",
)
IMAGE = Param(
    name="image",
    flag="--image",
    kind="str",
    metavar="PATH[:TAG]",
    help="a docker save archive or OCI layout directory (PATH or PATH:TAG), read as data",
)

VERIFY = Command(
    name="verify",
    params=(STACK, CHECKOUT, WHEEL, INSTALLED, SSH, HOSTS, IMAGE, LIMIT, PYTHON, JOBS, TIMEOUT, CONFIG, JSON, NO_CACHE),
    module="sgpatch.cli.verify",
    function="verify",
)
CHECK_INTERFACE = Command(
    name="check-interface",
    params=(STACK, CHECKOUT, WHEEL, INSTALLED, PYTHON, CONFIG, JSON, NO_CACHE),
    module="sgpatch.cli.interface",
    function="check_interface_cmd",
)
# the commands the fast command line may run (it declines every other argv: typer runs it)
FAST = {c.name: c for c in (VERIFY, CHECK_INTERFACE)}
