"""How much time the main job adds around the series' tests, cold and warm.

Runs `patchseries test` twice in a fresh work directory (the first run is cold: download, base, environment; the
second is warm) and prints, for each, the wall time, the tests' own time (from the JUnit report) and the difference.
Goals: warm overhead at most 30 s; a cold run on 2 cores under 5 minutes plus the torch download.

    python benchmarks/pipeline_overhead.py [--torch 2.13.0] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_once(workdir: Path, torch: str) -> tuple[float, float]:
    start = time.monotonic()
    command = [sys.executable, "-m", "patchseries", "test", "--torch", torch, "--workdir", str(workdir)]
    proc = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.exit(f"main job failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    suites = ET.parse(workdir / "reports" / f"torch-{torch}" / "junit.xml").getroot().iter("testsuite")
    return wall, sum(float(suite.get("time", 0)) for suite in suites)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", default="2.13.0")
    parser.add_argument("--workdir", type=Path)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="patchseries-bench-"))
    print(f"torch {args.torch}, work directory {workdir}")
    print(f"{'run':<6}{'wall s':>10}{'tests s':>10}{'overhead s':>12}")
    for label in ("cold", "warm"):
        wall, tests = run_once(workdir, args.torch)
        print(f"{label:<6}{wall:>10.1f}{tests:>10.1f}{wall - tests:>12.1f}")


if __name__ == "__main__":
    main()
