"""Bounded coverage-guided fuzzing of the parsers: each fuzz_<target>.py script runs in a
subprocess (atheris.Fuzz() exits the process) for a few seconds from its seed corpus.

Each run explores anew (libFuzzer picks a random seed), so a failure may be new: its input
is printed; replay it with ``python tests/fuzz/fuzz_<target>.py <file with the input>``.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.fuzz
# The scripts run on this interpreter; atheris has wheels up to CPython 3.11 (see pyproject).
pytest.importorskip("atheris", reason="atheris is not installed for this Python")

HERE = Path(__file__).parent
NETWORKS = HERE.parents[1] / "spark_apps" / "medusa_spark" / "networks"


@dataclass(frozen=True)
class Target:
    name: str
    seconds: int
    """libFuzzer's -max_total_time: the budget, on top of a few seconds of start-up."""
    runs: int
    """libFuzzer's -runs: whichever of the two comes first ends the run."""
    max_len: int
    extra_corpora: tuple[Path, ...] = ()

    @property
    def script(self) -> Path:
        return HERE / f"fuzz_{self.name}.py"


# The line parsers run ~50,000 inputs a second and saturate their coverage within a second or
# two. YAML is slow (milliseconds a document), so the network targets get the larger share.
TARGETS = [
    Target("envelope", seconds=5, runs=300_000, max_len=512),
    Target("csv", seconds=5, runs=300_000, max_len=256),
    Target("network_text", seconds=12, runs=100_000, max_len=2048, extra_corpora=(NETWORKS,)),
    Target("network_structured", seconds=15, runs=100_000, max_len=256),
]


def _crash_report(target: Target, artifacts: Path, output: str) -> str:
    inputs = [f"{path.name}: {path.read_bytes()!r}" for path in sorted(artifacts.iterdir())]
    # libFuzzer's own lines are noise next to the Python traceback, which comes last.
    tail = output[-6000:]
    return (f"fuzz_{target.name}.py failed; input(s):\n" + "\n".join(inputs or ["(none)"])
            + f"\n--- output (tail) ---\n{tail}")


@pytest.mark.parametrize("target", TARGETS, ids=lambda target: target.name)
def test_fuzz(target: Target, tmp_path: Path) -> None:
    # New corpus entries go to the first directory (a temporary one), crash inputs to the
    # artifacts folder: the checked-in seed corpus is only read.
    corpus, artifacts = tmp_path / "corpus", tmp_path / "artifacts"
    corpus.mkdir()
    artifacts.mkdir()
    seeds = HERE / "corpus" / target.name
    command = [
        sys.executable, str(target.script),
        f"-max_total_time={target.seconds}", f"-runs={target.runs}", f"-max_len={target.max_len}",
        "-len_control=0", "-timeout=10", "-rss_limit_mb=4096", "-print_final_stats=1",
        f"-artifact_prefix={artifacts}/",
        str(corpus), str(seeds), *map(str, target.extra_corpora),
    ]
    result = subprocess.run(command, capture_output=True, text=True, errors="replace",
                            timeout=target.seconds + 60, check=False)
    if result.returncode != 0:
        pytest.fail(_crash_report(target, artifacts, result.stdout + result.stderr),
                    pytrace=False)
