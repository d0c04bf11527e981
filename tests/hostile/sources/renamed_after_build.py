"""Graphs changed after the builder validated them (model_copy / model_construct skip
validation): every function here must be refused with one line, and nothing written."""
from leantile import ir
from leantile.dag import build_graph_with_output


def _base():
    def body(g):
        return g.matmul(g.input("X", ["m", "d"]), g.input("W", ["d", "n"]), "d", "d")

    return build_graph_with_output("mm", {"m": 8, "d": 16, "n": 8}, body)


def name_dotdot(**sizes):
    return _base().model_copy(update={"name": "../../evil"})


def name_absolute(**sizes):
    return _base().model_copy(update={"name": "/tmp/leantile-evil"})


def output_injection(**sizes):
    return _base().model_copy(update={"outputs": {'o"""\n__import__("os").system("touch hostile-marker")\n"""': 2}})


def input_injection(**sizes):
    g = _base()
    x = g.nodes[0].model_copy(update={"name": 'X\n    open("hostile-marker", "w").close() #'})
    return g.model_copy(update={"nodes": (x, *g.nodes[1:])})


def constructed_garbage(**sizes):
    return ir.Graph.model_construct(name="mm", axes={"m": -1}, nodes=(), outputs={"out": 5})


def constructed_object(**sizes):
    return ir.Graph.model_construct(name=object(), axes={}, nodes=(), outputs={})


def dangling_output(**sizes):
    return _base().model_copy(update={"outputs": {"out": 17}})
