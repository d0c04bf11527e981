"""What several commands share, defined once: the argument parser (a bad argument is one line
and exit 1), the options `--size`, `--candidate`, `--tile`, `--out`, the GPU check, and the
progress bar. Imports neither torch nor tilelang."""
from __future__ import annotations

import argparse
import sys

from ..progress import progress  # noqa: F401  (re-exported: the one progress bar)

EXIT_BAD_INPUT = 1
EXIT_BUG = 2


class ArgumentParser(argparse.ArgumentParser):
    """argparse, but a bad argument is one line and exit status 1 (bad input), so that
    status 2 means only "a bug in leantile"."""

    def error(self, message):
        print(f"error: {self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def add_sources(p, nargs: str = "*", default: str = "every built-in") -> None:
    p.add_argument("sources", nargs=nargs, metavar="SOURCE",
                   help="built-in name, file.json, module.py:function" + (f" (default: {default})" if nargs == "*" else ""))


def add_size(p) -> None:
    p.add_argument("--size", nargs="*", metavar="K=V", default=None,
                   help="axis sizes to override (built-ins and module.py sources), e.g. m=4096 d=128")


def add_candidate(p) -> None:
    p.add_argument("--candidate", default=None,
                   help="derivation candidate (default: the tuned entry's, else the first; see `leantile derive`)")


def add_tile(p) -> None:
    p.add_argument("--tile", nargs="*", metavar="K=V", default=None,
                   help="tile parameters (block_m block_n block_k block_r stages threads swizzle overlap pingpong swap_operands dependent_launch flush_subnormals fast_math last_arrival); "
                        "an unknown name, a value out of range or a block the kernels cannot use is refused "
                        "(blocks: a power of two or a multiple of 32, at most 1024)")


def add_out(p, default: str, what: str = "output folder") -> None:
    p.add_argument("--out", default=default, help=f"{what} (default {default})")


def require_gpu(command: str) -> None:
    """Exit at once, with one line, where there is no CUDA GPU (not after loading sources)."""
    from ..ir import GraphError

    try:
        import torch
    except ImportError:
        raise GraphError([f"{command}: needs PyTorch with CUDA, and torch is not installed here"]) from None
    if not torch.cuda.is_available():
        raise GraphError([f"{command}: needs a CUDA GPU and there is none here "
                          "(`leantile kernels` emits and lowers without one)"])
