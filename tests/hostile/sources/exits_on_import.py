import sys

sys.exit(3)


def build(**sizes):
    return None
