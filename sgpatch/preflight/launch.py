"""The launch command as the team writes it: ``KEY=VALUE ... python -m sglang.launch_server --flag value ...``.

The environment assignments before the command are the launch's environment, and only they: sgpatch's own
``os.environ`` is not read for SGLang's variables, because the report must say what *this command* would do
wherever it is pasted (a shell where someone once exported ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`` must
not hide the crash from a launch script that does not set it).  The flags are parsed by :mod:`argparse` built
from the stack's own declarations (:mod:`sgpatch.preflight.flags`), so abbreviations, ``--flag=value``, bool
flags and aliases behave as SGLang's parser does; what argparse would reject is a ``crash`` finding (SGLang exits
before anything loads, but the launch as written would still fail), not a usage error of sgpatch.
"""

from __future__ import annotations

import argparse
import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sgpatch.errors import SgpatchError
from sgpatch.preflight.flags import Flag, ServerFlags

_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_MODULES = ("sglang.launch_server",)
MAX_WORDS = 4096
MAX_WORD = 65536

# The ServerArgs fields preflight reads; every other flag given is listed as not checked.
CHECKED = frozenset(
    {
        "model_path",
        "speculative_draft_model_path",
        "speculative_draft_model_quantization",
        "tp_size",
        "ep_size",
        "dp_size",
        "enable_dp_attention",
        "context_length",
        "speculative_algorithm",
        "speculative_eagle_topk",
        "speculative_num_steps",
        "speculative_num_draft_tokens",
        "page_size",
        "attention_backend",
        "speculative_attention_mode",
        "speculative_draft_attention_backend",
        "moe_a2a_backend",
        "quantization",
        "dtype",
        "revision",
        "speculative_draft_model_revision",
        "decrypted_config_file",
        "decrypted_draft_config_file",
        "json_model_override_args",
        "load_format",
        "speculative_draft_load_format",
        "nnodes",
        "enable_flashinfer_allreduce_fusion",
        "flashinfer_allreduce_fusion_backend",
        "enforce_disable_flashinfer_allreduce_fusion",
        "enable_attn_tp_input_scattered",
    }
)


@dataclass(frozen=True, slots=True)
class Given:
    """One flag as written on the command line, and the ServerArgs field it sets."""

    written: str
    field: str
    checked: bool


@dataclass(frozen=True, slots=True)
class Launch:
    env: tuple[tuple[str, str], ...]
    program: str
    """How SGLang is started: ``python -m sglang.launch_server`` or ``sglang serve``."""
    argv: tuple[str, ...]
    args: Mapping[str, object]
    """ServerArgs field -> typed value, for the flags given (absent: SGLang's default)."""
    given: tuple[Given, ...]
    rejected: str
    """What argparse would say and exit on ('' when the flags parse)."""
    parse_at: str

    @property
    def environ(self) -> dict[str, str]:
        return dict(self.env)

    @property
    def unchecked(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(g.written for g in self.given if not g.checked))


def split_command(words: Sequence[str]) -> tuple[tuple[tuple[str, str], ...], str, tuple[str, ...]]:
    """(environment assignments, the program as a person reads it, the server's own argv)."""
    if not words:
        raise SgpatchError("no launch command after --", hint="sgpatch preflight -- python -m sglang.launch_server ...")
    if len(words) > MAX_WORDS or any(len(w) > MAX_WORD for w in words):
        raise SgpatchError(f"the launch command is over {MAX_WORDS} words or has a word over {MAX_WORD} characters")
    rest = list(words)
    env: list[tuple[str, str]] = []
    if rest and rest[0] == "env":
        rest.pop(0)
    while rest and _ENV.match(rest[0]):
        key, _, value = rest.pop(0).partition("=")
        env.append((key, value))
    if not rest:
        raise SgpatchError("the launch command is only environment assignments: no program to check")
    head = rest.pop(0)
    base = os.path.basename(head)
    if base == "sglang" and rest[:1] == ["serve"]:
        rest.pop(0)
        return tuple(env), "sglang serve", tuple(rest)
    if re.fullmatch(r"python[0-9.]*", base) or head == "-m":
        if head == "-m":
            rest.insert(0, "-m")
        while rest and rest[0].startswith("-") and rest[0] != "-m" and rest[0] in ("-u", "-O", "-B", "-E", "-s", "-I"):
            rest.pop(0)
        if len(rest) >= 2 and rest[0] == "-m" and rest[1] in _MODULES:
            return tuple(env), f"python -m {rest[1]}", tuple(rest[2:])
        if len(rest) >= 1 and rest[0].replace("\\", "/").endswith("sglang/launch_server.py"):
            return tuple(env), "python sglang/launch_server.py", tuple(rest[1:])
    raise SgpatchError(
        f"not an SGLang launch: {' '.join(words[:4])[:200]}",
        hint="give the command as you run it: [KEY=VALUE ...] python -m sglang.launch_server --model-path ... "
        "(or: sglang serve ...)",
    )


class _Rejected(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print usage and exit 2: SGLang's launch fails
        raise _Rejected(message)

    def exit(self, status: int = 0, message: str | None = None) -> Any:
        raise _Rejected(message or f"exit {status}")


def _json(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise argparse.ArgumentTypeError(f"not JSON: {exc}") from None


_SUFFIX = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _human_int(text: str) -> int:
    """SGLang 0.5.23's ``human_readable_int`` (``utils/common.py``): ``128k``, ``1Mi``, ``25.6k``, ``4096``."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", text.strip())
    if match is None:
        return int(text)
    number, suffix = match.groups()
    if suffix.endswith("i") and "." in number:
        raise argparse.ArgumentTypeError(f"decimals are not allowed with IEC suffixes like {suffix!r}")
    return int(Decimal(number) * _SUFFIX[suffix])


_TYPES: dict[str, Any] = {"int": int, "float": float, "str": str, "json": _json, "hint": _human_int}


def _parser(flags: ServerFlags) -> _Parser:
    parser = _Parser(prog="sglang serve", add_help=False)
    for f in flags.flags:
        kw: dict[str, Any] = {"dest": f.dest, "default": argparse.SUPPRESS}
        if f.kind in ("true", "false"):
            kw["action"] = "store_true" if f.kind == "true" else "store_false"
        elif f.kind == "none":
            kw["action"] = "store_const"
            kw["const"] = True
        else:
            kw["type"] = _TYPES[f.conv]
            if f.kind == "list":
                kw["nargs"] = "*"
            elif f.kind == "optional":
                kw["nargs"] = "?"
            if f.choices is not None and f.kind != "list":
                kw["choices"] = f.choices
        try:
            parser.add_argument(*f.strings, **kw)
        except (argparse.ArgumentError, ValueError, TypeError):
            continue  # a spelling declared twice: argparse in SGLang would have refused to start, not our case
    parser.add_argument("-h", "--help", action="store_const", const=True, dest="help", default=argparse.SUPPRESS)
    return parser


def parse_launch(words: Sequence[str], flags: ServerFlags) -> Launch:
    """The launch: its environment, program and the ServerArgs values its flags set."""
    env, program, argv = split_command(words)
    if "--config" in argv:
        raise SgpatchError(
            "the launch reads its flags from --config FILE: preflight does not read that file",
            hint="write the flags on the command line for the preflight",
        )
    parser = _parser(flags)
    by_string: dict[str, Flag] = {s: f for f in flags.flags for s in f.strings}
    rejected = ""
    values: dict[str, object] = {}
    try:
        ns, extra = parser.parse_known_args(list(argv))
        values = vars(ns)
        if extra:
            rejected = f"unrecognized arguments: {' '.join(extra)[:300]}"
        missing = [f.strings[0] for f in flags.flags if f.required and f.dest not in values]
        if missing and not rejected:
            rejected = f"the following arguments are required: {', '.join(missing)}"
    except _Rejected as exc:
        rejected = str(exc).strip()
    given: list[Given] = []
    for word in argv:
        if not word.startswith("--"):
            continue
        spelled = word.split("=", 1)[0]
        flag = by_string.get(spelled) or _abbrev(spelled, by_string)
        if flag is not None:
            field = flags.field_of(flag.dest)
            given.append(Given(spelled, field, field in CHECKED))
    args = {flags.field_of(k): v for k, v in values.items() if k != "help"}
    return Launch(env, program, argv, args, tuple(given), rejected, flags.parse_at)


def _abbrev(spelled: str, by_string: Mapping[str, Flag]) -> Flag | None:
    found = {id(f): f for s, f in by_string.items() if s.startswith(spelled)}
    return next(iter(found.values())) if len(found) == 1 else None
