import LeanTile.Architectures
import LeanTile.Derivation
import LeanTile.Export

/-!
`lake exe leantile-export DIR` writes `DIR/<arch>.json` for every built-in, byte for
byte what `leantile export DIR` (the Python mirror) writes.
-/

open LeanTile

def main (args : List String) : IO UInt32 := do
  match args with
  | [dir] =>
    IO.FS.createDirAll (System.FilePath.mk dir)
    let mut failed := false
    for entry in builtins do
      match entry.2 with
      | .ok g =>
        let path := System.FilePath.mk (dir ++ "/" ++ entry.1 ++ ".json")
        IO.FS.writeFile path (Export.graphJson g (derivationOf entry.1))
        IO.println s!"wrote {path}"
      | .error e =>
        IO.eprintln s!"{entry.1}: {e}"
        failed := true
    return (if failed then 1 else 0)
  | _ =>
    IO.eprintln "usage: lake exe leantile-export DIR"
    return 2
