"""The one error a user's input gets (floor 1: every floor may raise it). A GraphError holds one
line per problem, each naming the node, field or file; the CLI prints them and exits 1.
`leantile.ir.GraphError` and `leantile.GraphError` are this class."""
from __future__ import annotations


class GraphError(ValueError):
    """Bad input. `problems` holds one line per problem, each naming the node or field."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems) if self.problems else "invalid graph")
