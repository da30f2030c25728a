"""Re-judge every committed H200 run folder with one known-divergences file, using the parity package
found first on sys.path (the tree under test); write OUT/<run>/results.csv (+ environment.json)."""
import json, shutil, sys
from pathlib import Path
runs_root, toml, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
from parity.expect import load
from parity.report.runs import load_run
import parity
print("parity from", parity.__file__, file=sys.stderr)
for f in sorted({p.parent for p in runs_root.glob("h200-*/**/results.csv*")}):
    rel = f.relative_to(runs_root)
    df = load_run(f, load([toml]), rejudge=True).df
    d = out / rel
    d.mkdir(parents=True, exist_ok=True)
    cols = [c for c in df.columns if not c.endswith("_f")]
    df[cols].to_csv(d / "results.csv", index=False)
    if (f / "environment.json").exists():
        shutil.copy(f / "environment.json", d / "environment.json")
    else:
        (d / "environment.json").write_text("{}")
    print(rel, len(df), df["verdict"].value_counts().to_dict(), file=sys.stderr)
