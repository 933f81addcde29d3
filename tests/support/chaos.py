"""The chaos harness (hack/chaoskit) as its short forms use it."""

from __future__ import annotations

from hack.chaoskit import ChaosConfig, ChaosResult, run


def run_clean(cfg: ChaosConfig) -> ChaosResult:
    """Run the harness and print its summary; no invariant violated, everything converged
    after each fault, nothing left after teardown, no exit the harness did not cause."""
    res = run(cfg)
    print("\n" + res.summary())
    assert res.violations == []
    assert res.convergence_failures == []
    assert res.teardown_leftovers == []
    assert res.unexpected_exits() == []
    return res
