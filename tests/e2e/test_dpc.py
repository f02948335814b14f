"""DPC on the real stack, faults shorter or smaller than D: two sensor streams, one per
participant, merged and averaged per window by a fragment on beta with an availability
bound (X = 4 s, so D = 3 s). The link between alpha and beta is cut for 1.5 s, then slowed
by 500 ms each way for 10 s (a record pulled across it comes up to about 1.5 s later:
the fetch's way there and back and the response's way). Neither may give a tentative
result, and the output equals the fault-free reference, tuple for tuple.

A failure longer than D (tentative results while it lasts, then UNDO, the corrections and
REC_DONE, one trace in Jaeger) is the README's walk-through, `test_readme_dpc.py`; faults
in sequence and a node killed while cut off are `test_dpc_sequences.py`."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import pytest

from medusa.catalog.client import CatalogClient
from medusa.stable_view import stable_view
from medusa_apps.bench.dpc_partition import Fault, ScenarioRun, deployed_pair, run_scenario
from tests.federation_processes import federation_env

pytestmark = pytest.mark.e2e

SECONDS = 25
"""At least; the input goes on until the last fault has ended."""
BOUND = "4 seconds"
SHORT_CUT = (6.0, 1.5)
"""(after, for) seconds: shorter than D."""
SLOW_LINK = (10.0, 10.0, 500)
"""(after, for, ms each way): records up to about 1.5 s later, less than D."""


@pytest.fixture(scope="module")
def dpc_run(federation, beta_node, links, spark, registry_module) -> Iterator[ScenarioRun]:
    at, for_s, latency_ms = SLOW_LINK
    faults = [Fault("partition alpha-beta", *SHORT_CUT, lambda: links.partition("alpha", "beta"),
                    lambda: links.heal("alpha", "beta")),
              Fault(f"slow link +{latency_ms} ms", at, for_s,
                    lambda: links.slow("alpha", "beta", latency_ms),
                    lambda: links.heal("alpha", "beta"))]
    with CatalogClient(federation.catalog_url) as catalog, deployed_pair(
            federation, registry_module, spark, catalog, beta_node.global_name, BOUND) as (
            network, topic):
        yield run_scenario(federation, registry_module, federation.catalog_url, network, topic,
                           SECONDS, faults)


def test_faults_below_d_give_no_tentative_output(dpc_run: ScenarioRun) -> None:
    tentative = dpc_run.tentative_output_ms()
    assert tentative == [], (
        f"{len(tentative)} tentative record(s), the first "
        f"{(tentative[0] - dpc_run.faults[0].began_ms) / 1000:.1f}s after the cut began")


def test_the_catalog_never_shows_up_failure(dpc_run: ScenarioRun) -> None:
    states = [state for _, state in dpc_run.dpc_states]
    assert "UP_FAILURE" not in states, states


def test_the_stable_view_equals_the_fault_free_run(dpc_run: ScenarioRun) -> None:
    view = stable_view(c.record for c in dpc_run.records)
    got = {r.tuple_id: r.value for r in view.stable}
    missing = sorted(set(dpc_run.expected) - set(got))
    extra = sorted(set(got) - set(dpc_run.expected))
    assert not missing and not extra, f"missing {missing[:5]}, extra {extra[:5]}"
    wrong = {i: (got[i], v) for i, v in dpc_run.expected.items()
             if {k: got[i][k] for k in v} != v}
    assert not wrong, f"{len(wrong)} result(s) differ, e.g. {list(wrong.items())[:2]}"
    assert view.tentative == [] and not view.reconciling


def test_medusa_verify_finds_the_output_equal_to_the_reference(dpc_run: ScenarioRun, federation,
                                                                 tmp_path) -> None:
    reference = tmp_path / "fault-free.jsonl"
    reference.write_text("".join(json.dumps({"type": "STABLE", "id": i, "stime": 0, "value": v})
                                 + "\n" for i, v in dpc_run.expected.items()))
    command = [sys.executable, "-m", "medusa_apps", "verify", dpc_run.topic, "--against",
               str(reference), "--participant", "beta", "--idle", "3"]
    env = federation_env(federation, tmp_path)
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "equal" in done.stdout
    # One result changed in the reference: the difference is found and named.
    changed = next(iter(dpc_run.expected))
    wrong = {**dpc_run.expected, changed: {**dpc_run.expected[changed], "readings": -1}}
    reference.write_text("".join(json.dumps({"type": "STABLE", "id": i, "value": v}) + "\n"
                                 for i, v in wrong.items()))
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1 and changed in done.stdout + done.stderr

