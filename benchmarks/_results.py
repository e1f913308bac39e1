"""The JSON file a benchmark script writes (schema ``vecenv-script/1``), shared by the scripts here.

Imported as ``_results``: a script run as ``python benchmarks/NAME.py`` has this folder on its path.
"""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path
from typing import Any

from vecenv.bench.report import machine_info, versions


def write_script_json(path: Path, script: str, settings: dict[str, Any], tables: list[dict],
                      machine: dict[str, Any] | None = None) -> None:
    """A benchmark script's run as JSON: every round of every table, with the script's settings,
    the machine and the versions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "schema": "vecenv-script/1",
        "script": script,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": sys.argv[1:],
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in settings.items()},
        "machine": {**machine_info(), **(machine or {})},
        "versions": versions(),
        "tables": tables,
    }
    path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {path}")
