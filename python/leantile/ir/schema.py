"""Write schemas/leantile-v1.schema.json from the pydantic models: `python -m leantile.ir.schema`."""
import json
import sys
from pathlib import Path

from ..files import write_atomic
from . import json_schema

if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "schemas/leantile-v1.schema.json")
    write_atomic(out, json.dumps(json_schema(), indent=2, sort_keys=True) + "\n")
    print(f"wrote {out}")
