"""Graph -> JSON -> graph is the identity, the bytes are stable, and the committed JSON
Schema matches the models."""
import json
from pathlib import Path

from hypothesis import given

from leantile import architectures, ir
from strategies import random_graphs

ROOT = Path(__file__).resolve().parents[2]


def test_builtin_roundtrip_is_identity():
    for name in architectures.NAMES:
        g = architectures.build(name)
        text = g.to_json()
        g2 = ir.parse(text)
        assert g2 == g
        assert g2.to_json() == text


@given(random_graphs())
def test_random_graph_roundtrip(g):
    assert ir.parse(g.to_json()) == g


def test_json_layout_is_compact_sorted_with_newline():
    text = architectures.build("matmul").to_json()
    assert text.endswith("}\n") and "\n" not in text[:-1] and ": " not in text
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":")) + "\n"


def test_committed_schema_is_current():
    committed = json.loads((ROOT / "schemas" / "leantile-v1.schema.json").read_text())
    assert committed == ir.json_schema(), "schema is stale: run `python -m leantile.ir.schema`"


def test_schema_accepts_exports():
    import jsonschema
    schema = ir.json_schema()
    for name in architectures.NAMES:
        jsonschema.validate(json.loads(architectures.build(name).to_json()), schema)
