"""hack/flake_hunt.py reads failures from pytest's own JUnit record: a real pytest run of a
module with a passing, a failing and an erroring test gives exactly the two with their ids,
kinds, messages and output, and the report names each under its run."""

from __future__ import annotations

import subprocess
import sys

from hack.flake_hunt import Run, failures_of, report


def test_failures_are_read_from_pytests_junit_record_and_reported_per_run(tmp_path):
    (tmp_path / "test_sample.py").write_text(
        "import pytest\n"
        "def test_ok():\n    pass\n"
        "def test_bad():\n    print('the product wrote 3')\n    assert 1 + 1 == 3, 'one plus one'\n"
        "@pytest.fixture\ndef broken():\n    raise RuntimeError('bed did not start')\n"
        "def test_err(broken):\n    pass\n")
    junit = tmp_path / "r.xml"
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                        "test_sample.py"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 1
    tests, failed = failures_of(junit)
    assert tests == 3
    assert [(f.test, f.kind) for f in failed] == [("test_sample::test_bad", "failure"), ("test_sample::test_err", "error")]
    assert "one plus one" in failed[0].message and "the product wrote 3" in failed[0].output
    assert "bed did not start" in failed[1].message + failed[1].output
    text = report([Run(index=1, hog=False, tests=3, returncode=1, failures=failed, load=[1.0, 3.0]),
                   Run(index=2, hog=True, tests=3, returncode=0, load=[2.5])], [])
    assert "| 1 | no |  | 0.0 | 3 | 2 | 1 | 2.0 / 3.0 |" in text and "| 2 | yes |  | 0.0 | 3 | 0 | 0 | 2.5 / 2.5 |" in text
    assert "Failures: **2** in 1 of 2 runs." in text
    assert "### Run 1: failure in `test_sample::test_bad`" in text
