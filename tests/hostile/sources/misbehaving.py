"""Python sources that misbehave: each must end in one line and exit status 1."""
import sys


def exits(**sizes):
    sys.exit(0)


def exits_text(**sizes):
    sys.exit("bye")


def returns_dict(**sizes):
    return {"schema": "leantile/v1"}


def returns_none(**sizes):
    return None


def recurses(**sizes):
    return recurses(**sizes)


def raises(**sizes):
    raise RuntimeError("boom\nsecond line")


def keyboard(**sizes):
    raise MemoryError()


not_callable = 3


class _Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no")


def unprintable(**sizes):
    raise _Unprintable()


def generator_exit(**sizes):
    raise GeneratorExit()


def empty_graph_error(**sizes):
    from leantile import ir
    raise ir.GraphError([])
