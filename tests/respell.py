"""Respell a vLLM exposition the ways pipelines do: `vllm_` (OpenTelemetry's colon → underscore), `ray_vllm:` and
`ray_vllm_` (Ray Serve's export). Only the metric name's prefix changes, on HELP/TYPE lines and sample lines;
labels, values, order and suffixes stay byte for byte.

    python tests/respell.py   # rewrites the derived fixtures named in tests/fixtures/SOURCE
"""

from __future__ import annotations

import re
from pathlib import Path

SPELLINGS = ("vllm_", "ray_vllm:", "ray_vllm_")
_NAME = re.compile(r"^(# (?:HELP|TYPE|UNIT) )?vllm:", re.MULTILINE)
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "vllm_metrics"
DERIVED = {"v0_10_2_otel_underscore.txt": ("v0_10_2.txt", "vllm_"),
           "v0_10_2_ray_serve.txt": ("v0_10_2.txt", "ray_vllm:"),
           "refserver_tiny_ray_underscore.txt": ("refserver_tiny.txt", "ray_vllm_")}


def respell(text: str, prefix: str) -> str:
    """`text` with every `vllm:` metric name spelled `prefix` + rest."""
    if prefix not in SPELLINGS:
        raise ValueError(f"unknown spelling {prefix!r}")
    return _NAME.sub(lambda m: (m.group(1) or "") + prefix, text)


if __name__ == "__main__":
    for out, (src, prefix) in DERIVED.items():
        head = f"# DERIVED: {src} respelled {prefix} by tests/respell.py (every other byte as in {src})\n"
        (FIXTURES / out).write_text(head + respell((FIXTURES / src).read_text(), prefix))
        print(f"wrote {out} from {src} ({prefix})")
