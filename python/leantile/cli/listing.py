"""`leantile list`: the built-in architectures, their default sizes and what they compute."""
from __future__ import annotations

from .. import architectures


def cmd_list(args) -> int:
    for name in architectures.NAMES:
        mod = architectures.module(name)
        sizes = " ".join(f"{k}={v}" for k, v in mod.DEFAULT_SIZES.items())
        doc = (mod.__doc__ or "").strip().splitlines()[0]
        print(f"{name:<24} {sizes:<36} {doc}")
    return 0


def register(sub) -> None:
    sub.add_parser("list", help="list the built-in architectures").set_defaults(fn=cmd_list)
