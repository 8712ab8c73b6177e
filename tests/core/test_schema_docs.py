"""Meta-test: every column declared in stallscope/core/schema.py is documented in docs/schema.md."""

import re

from conftest import ROOT
from stallscope.core.schema import FRAMES


def _doc_sections() -> dict[str, str]:
    text = (ROOT / "docs" / "schema.md").read_text()
    parts = re.split(r"^## `([a-z_]+)`\s*$", text, flags=re.M)
    return {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def test_every_frame_and_column_is_documented():
    sections = _doc_sections()
    missing = []
    for kind, cols in FRAMES.items():
        body = sections.get(kind)
        if body is None:
            missing.append(f"frame {kind}")
            continue
        missing += [f"{kind}.{c.name}" for c in cols if f"| `{c.name}` |" not in body]
    assert not missing, f"undocumented in docs/schema.md: {missing}"
