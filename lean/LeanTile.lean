import LeanTile.IR
import LeanTile.DagM
import LeanTile.Architectures
import LeanTile.Derivation
import LeanTile.Export
import LeanTile.Semantics
import LeanTile.Vjp
import LeanTile.Rules
