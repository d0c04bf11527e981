import LeanTile.Architectures
import LeanTile.Derivation
import LeanTile.Export

/-!
`lake exe leantile-export DIR` writes `DIR/<arch>.json` for every architecture in
`exportedArchitectures` (built-ins and user architectures), byte for byte what
`leantile export` (the Python mirror) writes.

All or nothing: every graph is built first; if one fails to build, the exporter prints
`error: <its Lean file>: <arch>: <builder message>` for each failure, writes nothing and
exits 1. Each file is written to a hidden temporary name and renamed into place, so a
reader never sees a half-written export. (Errors in the Lean source itself never reach
this point: `lake build` reports them as `<file>:<line>:<col>: error: ...`.)
-/

open LeanTile

def main (args : List String) : IO UInt32 := do
  match args with
  | [dir] =>
    let mut ready : Array (String × String) := #[]
    let mut failed := false
    for entry in exportedArchitectures do
      let file := (List.lookup entry.1 architectureFiles).getD "lean/LeanTile/Architectures.lean"
      match entry.2 with
      | .ok g =>
        match Export.badNames g with
        | [] => ready := ready.push (entry.1, Export.graphJson g (derivationOf entry.1))
        | bad =>
          IO.eprintln s!"error: {file}: {entry.1}: names must be identifiers ([A-Za-z_][A-Za-z0-9_]*, at most 64 characters): {bad}"
          failed := true
      | .error e =>
        IO.eprintln s!"error: {file}: {entry.1}: {e}"
        failed := true
    if failed then
      IO.eprintln "leantile-export: nothing written"
      return 1
    IO.FS.createDirAll (System.FilePath.mk dir)
    for (stem, content) in ready do
      let path := System.FilePath.mk (dir ++ "/" ++ stem ++ ".json")
      let tmp := System.FilePath.mk (dir ++ "/." ++ stem ++ ".json.tmp")
      IO.FS.writeFile tmp content
      IO.FS.rename tmp path
      IO.println s!"wrote {path}"
    return 0
  | _ =>
    IO.eprintln "usage: lake exe leantile-export DIR"
    return 2
