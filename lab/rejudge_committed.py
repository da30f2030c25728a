"""Re-judge every committed H200 run folder with one known-divergences file, using the ``parity``
package found first on ``sys.path`` (the tree under test), and write ``OUT/<run>/results.csv`` (and
its ``environment.json``) for ``parity diff``: how issue 33 checked that the redesign changed no
verdict (reports/redesign-verdicts-2026-12-05/README.md).

    PYTHONPATH=TREE python lab/rejudge_committed.py REPORTS_DIR KNOWN_DIVERGENCES_TOML OUT
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def main(runs_root: Path, toml: str, out: Path) -> None:
    import parity
    from parity.expect import load
    from parity.report.runs import load_run

    print("parity from", parity.__file__, file=sys.stderr)
    for folder in sorted({p.parent for p in runs_root.glob("h[12]00-*/**/results.csv*")}):
        rel = folder.relative_to(runs_root)
        df = load_run(folder, load([toml]), rejudge=True).df
        dest = out / rel
        dest.mkdir(parents=True, exist_ok=True)
        df[[c for c in df.columns if not c.endswith("_f")]].to_csv(dest / "results.csv", index=False)
        env = folder / "environment.json"
        if env.exists():
            shutil.copy(env, dest / "environment.json")
        else:
            (dest / "environment.json").write_text("{}")
        print(rel, len(df), df["verdict"].value_counts().to_dict(), file=sys.stderr)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]))
