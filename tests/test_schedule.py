"""tests/support/schedule.py: the order in which the xdist workers take the modules (issue 28)."""

from __future__ import annotations

from tests.support.schedule import PER_TEST_SECONDS, UNKNOWN_SECONDS, load_record, order_modules


def units(**tests: int) -> dict[str, dict[str, bool]]:
    return {f"tests/{m}.py": {f"tests/{m}.py::t{i}": False for i in range(n)} for m, n in tests.items()}


def test_recorded_modules_go_longest_first_whatever_their_number_of_tests():
    u = units(test_many=180, test_chaos=17, test_webhook=1)
    record = {"tests/test_many.py": 5.2, "tests/test_chaos.py": 474.5, "tests/test_webhook.py": 78.0}
    assert order_modules(u, record) == ["tests/test_chaos.py", "tests/test_webhook.py", "tests/test_many.py"]


def test_an_unrecorded_module_counts_its_estimate_and_ties_keep_collection_order():
    u = units(test_a=1, test_new=40, test_b=1, test_c=1)
    record = {"tests/test_a.py": UNKNOWN_SECONDS + 40 * PER_TEST_SECONDS + 1, "tests/test_b.py": 0.5,
              "tests/test_c.py": 0.5}
    assert order_modules(u, record) == ["tests/test_a.py", "tests/test_new.py", "tests/test_b.py", "tests/test_c.py"]


def test_a_missing_or_broken_record_is_empty(tmp_path):
    assert load_record(tmp_path / "absent.json") == {}
    (tmp_path / "bad.json").write_text("{not json")
    assert load_record(tmp_path / "bad.json") == {}
    (tmp_path / "list.json").write_text("[1, 2]")
    assert load_record(tmp_path / "list.json") == {}
    (tmp_path / "ok.json").write_text('{"tests/test_a.py": 3, "tests/test_b.py": "x"}')
    assert load_record(tmp_path / "ok.json") == {"tests/test_a.py": 3.0}


def test_the_committed_record_names_existing_modules_only():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    record = load_record()
    assert record, "tests/module_seconds.json is the workers' order; it must not be empty"
    assert [m for m in record if not (root / m).is_file()] == []
