"""The README and design notes cite only files that exist (a moved file must take its
references along)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITED = re.compile(r"`((?:golden|rtl|platforms|testbench|tests|cli|docs)/[\w./-]+?"
                   r"\.(?:py|vlt|v|md|core|json))[`:\s)]")


def test_cited_files_exist():
    missing = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for m in CITED.finditer(doc.read_text()):
            if not (ROOT / m.group(1)).exists():
                missing.append(f"{doc.relative_to(ROOT)} cites {m.group(1)}")
    assert missing == []
