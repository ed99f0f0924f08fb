#!/usr/bin/env python3
"""Execute the notebooks in place, so that they are committed with their outputs (what a reader sees on the web
without running anything). Runs each notebook top to bottom in a fresh kernel from the notebooks/ folder, on the
CPU (``CUDA_VISIBLE_DEVICES`` is emptied unless ``--gpu``), so that the committed outputs are those of the small
sizes CI runs (CI executes the same notebooks with nbmake, see scripts/test.sh, and does not write them back).
No per-cell timing metadata is written, so that a rerun changes only what the notebook printed.

    python scripts/execute_notebooks.py                          # every notebook in notebooks/
    python scripts/execute_notebooks.py notebooks/02_fem_mixed_precision.ipynb [--gpu] [--timeout 600]

Needs nbclient and ipykernel (the ``dev`` and ``notebooks`` extras install them).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def execute(path: Path, timeout: int) -> int:
    """Run one notebook in place; return its size in bytes after writing."""
    import nbclient  # late: optional (the notebooks extra)
    import nbformat  # late: optional (the notebooks extra)

    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    nbformat.write(nb, path)
    return path.stat().st_size


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("notebooks", nargs="*", type=Path, help="default: notebooks/*.ipynb")
    ap.add_argument("--gpu", action="store_true", help="let the notebooks see a GPU (default: the CPU, as CI)")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    args = ap.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("*.ipynb"))
    if not args.gpu:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.setdefault("PYTHONHASHSEED", "0")
    os.environ.pop("MPLBACKEND", None)      # the kernel's inline backend, so that the figures are kept (Agg draws none)
    for path in paths:
        if not path.is_file():
            print(f"execute_notebooks: error: {path}: no such notebook", file=sys.stderr)
            return 2
        size = execute(path, args.timeout)
        print(f"{path}: executed, {size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
