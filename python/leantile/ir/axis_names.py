"""Axis names a plan can hold: one name, one axis, in every kernel.

A plan matches buffers to tiles by axis name, so inside one GEMM kernel a name must mean one
axis. The IR allows `matmul(X[m, k], W[j, k], "k", "j")`: A's contracted axis and B's free
axis are both called k, and the kernel would have to stream k and tile k at once (issue 13
#4). `unclash(g)` renames such axes apart before derivation: the axis positions of the graph
fall into classes (an elementwise op, a reduction's kept axes, a matmul's free and batch axes
are the same axis as their operands' of the same name; a contraction's two sides are not
joined, the stream's aliases name them), and the class of the clashing contracted axis gets
a fresh name of the same size (`k_1`). Positions keep their order, so tensors are unchanged;
a graph without a clash is returned as it is (its plans do not change).

Floor 2, below ir (whose check reports the clashes no renaming can separate: clash_problems), so it
imports nothing of the package: `g` is an ir.Graph, its nodes told apart by `op`; derive's Ctx
renames with unclash.
"""
from __future__ import annotations


class _Classes:
    """Union-find over (node id, axis name) positions."""

    def __init__(self):
        self.parent: dict[tuple, tuple] = {}

    def find(self, x):
        p = self.parent.setdefault(x, x)
        root = x
        while p != root:
            root, p = p, self.parent.setdefault(p, p)
        while x != root:  # path compression
            self.parent[x], x = root, self.parent[x]
        return root

    def join(self, x, y):
        rx, ry = self.find(x), self.find(y)
        if rx != ry:
            self.parent[rx] = ry


def _clashes(g):
    """(matmul, operand node, contracted axis) for each contraction whose axis name is also
    a non-contracted axis of the other operand."""
    for n in g.nodes:
        if n.op == "matmul" and n.axis_a != n.axis_b:
            a, b = g.nodes[n.a], g.nodes[n.b]
            if n.axis_a in b.axes:
                yield n, n.a, n.axis_a
            if n.axis_b in a.axes:
                yield n, n.b, n.axis_b


def _classes(g) -> _Classes:
    cl = _Classes()
    for n in g.nodes:
        for x in n.axes:
            cl.find((n.id, x))
        if n.op == "matmul":
            free_a = [x for x in g.nodes[n.a].axes if x != n.axis_a]
            for x in free_a:
                cl.join((n.id, x), (n.a, x))
            for y in g.nodes[n.b].axes:
                if y != n.axis_b:
                    cl.join((n.id, y), (n.b, y))
        else:
            for arg in n.args():
                for x in g.nodes[arg].axes:
                    if x in n.axes:
                        cl.join((n.id, x), (arg, x))
    return cl


def clash_problems(g) -> list[str]:
    """One line per contraction no renaming can separate: the contracted axis is, through
    elementwise ops, the same axis as one the matmul keeps (`matmul(X[m, k], W[j, k], "k", "j")
    + X`: X's k is summed and kept at once). ir.check reports these, so every graph the IR
    accepts can be renamed apart and derived."""
    if next(_clashes(g), None) is None:
        return []
    cl = _classes(g)
    out = []
    for mm, operand, axis in _clashes(g):
        if cl.find((operand, axis)) == cl.find((mm.id, axis)):
            out.append(f"node {mm.id} (matmul): axis {axis!r} is contracted and also kept as the same axis "
                       "(through the ops that share its name); give the two axes different names")
    return sorted(set(out))


def unclash(g):
    """g with each clashing contracted axis renamed apart (`k` -> `k_1`); g itself where none clashes."""
    if next(_clashes(g), None) is None:
        return g
    cl = _classes(g)
    rename: dict[tuple, str] = {}  # class root -> its new name
    taken = set(g.axes)
    for mm, operand, axis in _clashes(g):
        root = cl.find((operand, axis))
        if root in rename:
            continue
        if root == cl.find((mm.id, axis)):  # ir.check refuses such graphs (clash_problems)
            raise RuntimeError(f"leantile bug: node {mm.id} (matmul): axis {axis!r} cannot be renamed apart, "
                               "but the graph passed validation")
        j = 1
        while f"{axis}_{j}" in taken:
            j += 1
        rename[root] = f"{axis}_{j}"
        taken.add(rename[root])
    if not rename:
        return g

    def name(i, x):
        return rename.get(cl.find((i, x)), x)

    nodes, axes = [], dict(g.axes)
    for n in g.nodes:
        upd = {"axes": tuple(name(n.id, x) for x in n.axes)}
        if n.op == "reduce":
            upd["axis"] = name(n.x, n.axis)
        elif n.op == "matmul":
            upd["axis_a"], upd["axis_b"] = name(n.a, n.axis_a), name(n.b, n.axis_b)
        for old, new in zip(n.axes, upd["axes"]):
            axes[new] = g.axes[old]
        nodes.append(n.model_copy(update=upd))
    return g.model_copy(update={"nodes": tuple(nodes), "axes": axes})
