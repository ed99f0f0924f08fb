"""The documentation that is generated from code is current, and the README's commands name real things."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent


def test_case_reference_page_is_current():
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "case_reference.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_readme_mentions_only_existing_case_files_and_scripts():
    text = (ROOT / "README.md").read_text()
    paths = set(re.findall(r"\b((?:cases|scripts|notebooks|docs)/[\w./-]+\.(?:toml|sh|py|ipynb|md))", text))
    assert paths, "the README should point at case files and scripts"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing
