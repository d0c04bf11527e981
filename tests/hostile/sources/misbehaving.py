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
