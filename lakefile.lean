import Lake
open Lake DSL

/-!
leantile: architectures as a small DSL (`LeanTile.DagM`), the rewrite lemmas over ℝ
(`LeanTile.Rules.*`), and the exporter `lake exe leantile-export DIR`.

Toolchain and Mathlib are pinned as a pair: `lean-toolchain` says
`leanprover/lean4:v4.34.0` and Mathlib is required at its release tag `v4.34.0`,
which was cut for exactly that toolchain (see docs/lean.md).
Run `lake exe cache get` before `lake build`.
-/

package «leantile» where
  leanOptions := #[⟨`autoImplicit, false⟩]

require "leanprover-community" / "mathlib" @ git "v4.34.0"

@[default_target]
lean_lib LeanTile where
  srcDir := "lean"

lean_exe «leantile-export» where
  srcDir := "lean"
  root := `Main
