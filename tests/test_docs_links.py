"""The user documentation points at things that exist (no server).

* every relative link between README.md and ``docs/*.md`` resolves: the file exists and, for a
  ``#fragment``, the target has a heading of that anchor (GitHub's rule: lower case, spaces to
  hyphens, punctuation other than ``-`` and ``_`` dropped, a repeated anchor gets ``-1``, ``-2``);
* every ``hack/<path>`` and ``tests/<file>.py`` a doc names exists, and every
  ``tests/<file>.py::test_name`` names a test defined in that file;
* every ``controller/…py``, ``ovn/…py`` and ``informers/…py`` path a doc names exists, and every
  dotted name under ``controller.``, ``ovn.``, ``informers.`` or ``hack.`` written in a code span
  resolves: a module is found (not imported: an optional dependency may be missing); else the
  longest prefix that is a module imports and the rest is found by ``getattr``, the first of it
  defined there or listed in its ``__all__`` (``controller.plan.gateway.gateway_status``,
  ``ovn.nb.NBClient.snapshot``; a name a module merely imports is not its home). Not Python, so not
  checked: a host or label (``ovn.kubernetes.io/chassis``, ``*.proxmox.cozystack.io``), a file
  name (``controller.log``, ``controller.kubeconfig``) and a chart value (``ovn.nbAddress``).
  ``docs/changelog.md`` and the profiler output of ``docs/performance.md`` (paths of their day,
  written ``/work/main/controller/…``, so never a path of the tree as a doc names it) record
  history and are not checked;
* every reason of ``controller/reasons.py`` (conditions and Events) has an entry in
  ``docs/runbook.md``: a heading that is the reason itself, optionally followed by a
  parenthesised note (``Ready (zone)``). ``controller/doctor.py`` prints
  ``runbook: docs/runbook.md, section <Reason>``, so the heading is what an operator looks for.

Expected values come from the tree (files, test definitions, the reasons module), so each
check fails when a doc and the tree part ways. The path checks report every missing path at
once.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

from controller import doctor, reasons

REPO = Path(__file__).resolve().parent.parent
DOCS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])

LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
# A path as a doc names it: not part of a longer path or URL (``../hack/x``, ``github.com/…/hack``).
HACK_PATH = re.compile(r"(?<![\w./-])hack/[A-Za-z0-9_][A-Za-z0-9_./-]*")
CODE_PATH = re.compile(r"(?<![\w./-])(?:controller|ovn|informers)/[A-Za-z0-9_/]*\.py\b")
CODE_SPAN = re.compile(r"`([^`]+)`")
DOTTED = re.compile(r"(?<![\w./*-])(?:controller|ovn|informers|hack)(?:\.[A-Za-z_][A-Za-z0-9_]*)+(?![\w./*-])")
# A dotted word that is not Python: a file name, a host or label (a segment that is a top-level
# domain), a chart value (a lowerCamelCase key; Python names are snake_case or CapWords).
NOT_PYTHON_TAIL = {"py", "log", "kubeconfig", "yaml", "yml", "json", "txt", "md", "sh", "env", "toml"}
DOMAIN_SEGMENTS = {"io", "com", "org", "net", "dev"}
HISTORY = {"changelog.md"}
TEST_PATH = re.compile(r"(?<![\w./-])(tests/[A-Za-z0-9_/]+\.py)(?:::([A-Za-z_][A-Za-z0-9_]*))?")


def _prose_lines(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def headings(text: str) -> list[str]:
    """The heading texts of a Markdown document, in order (fenced code excluded)."""
    return [m.group(2) for line in _prose_lines(text) if (m := HEADING.match(line))]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: the rendered text (code spans and link targets dropped,
    link text kept), lower case, each space a hyphen, every other character that is not a
    letter, digit, ``-`` or ``_`` removed."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return "".join(c for c in text.replace(" ", "-") if c.isalnum() or c in "-_")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for h in headings(text):
        base = slug(h)
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    out.update(re.findall(r'<a\s+(?:name|id)="([^"]+)"', text))
    return out


def _doc_id(path: Path) -> str:
    return str(path.relative_to(REPO))


def test_the_docs_exist():
    names = {p.name for p in DOCS}
    assert {"README.md", "install.md", "operations.md", "runbook.md", "sizing.md", "metrics.md", "api.md",
            "admission.md", "architecture.md", "performance.md", "reliability.md", "testing.md",
            "changelog.md"} <= names


def test_every_relative_link_resolves():
    broken = []
    for doc in DOCS:
        text = doc.read_text()
        for line in _prose_lines(text):
            for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                path_part, _, fragment = target.partition("#")
                dest = (doc.parent / path_part).resolve() if path_part else doc
                if not dest.exists():
                    broken.append(f"{_doc_id(doc)}: {target} (no such file)")
                    continue
                if fragment and dest.suffix == ".md" and fragment not in anchors(dest.read_text()):
                    broken.append(f"{_doc_id(doc)}: {target} (no heading #{fragment} in {dest.name})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def _exists(path: str) -> bool:
    """A file or directory, or a module's attribute written ``hack/wait.py``'s way as
    ``hack/wait.until`` / ``hack/bed/procs.free_ports`` (the module file must exist)."""
    if (REPO / path).exists():
        return True
    head, _, tail = path.rpartition("/")
    module = tail.split(".", 1)[0]
    return "." in tail and (REPO / head / f"{module}.py").exists()


def _named_paths() -> tuple[list[str], list[str]]:
    """(missing hack/ and tests/ paths, tests named with ``::`` that the file does not define)."""
    missing, undefined = set(), set()
    for doc in DOCS:
        for line in _prose_lines(doc.read_text()):
            for raw in HACK_PATH.findall(line):
                path = raw.rstrip(".,;:)")
                if not _exists(path):
                    missing.add(f"{path} (named in {_doc_id(doc)})")
            for path, test in TEST_PATH.findall(line):
                file = REPO / path
                if not file.exists():
                    missing.add(f"{path} (named in {_doc_id(doc)})")
                elif test and not re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(test)}\b",
                                            file.read_text(), re.M):
                    undefined.add(f"{path}::{test} (named in {_doc_id(doc)})")
    return sorted(missing), sorted(undefined)


def test_every_named_hack_and_tests_path_exists():
    missing, _ = _named_paths()
    assert not missing, f"{len(missing)} path(s) named in the docs do not exist:\n" + "\n".join(missing)


def test_every_named_test_is_defined():
    _, undefined = _named_paths()
    assert not undefined, f"{len(undefined)} test(s) named in the docs are not defined:\n" + "\n".join(undefined)


def _code_docs() -> list[Path]:
    return [doc for doc in DOCS if doc.name not in HISTORY]


def test_every_named_code_path_exists():
    missing = set()
    for doc in _code_docs():
        for line in _prose_lines(doc.read_text()):
            for path in CODE_PATH.findall(line):
                if not (REPO / path).exists():
                    missing.add(f"{path} (named in {_doc_id(doc)})")
    assert not missing, f"{len(missing)} code path(s) named in the docs do not exist:\n" + "\n".join(sorted(missing))


def _is_python_name(name: str) -> bool:
    parts = name.split(".")
    if parts[-1] in NOT_PYTHON_TAIL or DOMAIN_SEGMENTS & set(parts):
        return False
    return not any(re.fullmatch(r"[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*", p) for p in parts[1:])


def dotted_names(text: str) -> list[str]:
    """The Python names under the four roots that a code span or a command line holds."""
    return [n for n in DOTTED.findall(text) if _is_python_name(n)]


def resolve(name: str) -> str | None:
    """None when ``name`` is a module, or an attribute path of the module that defines its first
    attribute or exports it in ``__all__`` (a name a module merely imports is not its home);
    else why not."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            if importlib.util.find_spec(module_name) is None:
                continue
        except ModuleNotFoundError:  # a parent is not a package
            continue
        if cut == len(parts):  # a module: found, not imported (an optional dependency may be missing)
            return None
        try:
            obj = module = importlib.import_module(module_name)
        except ImportError as e:
            return f"importing {module_name} fails: {e}"
        for i, attr in enumerate(parts[cut:]):
            if not hasattr(obj, attr):
                return f"{'.'.join(parts[:cut + i])} has no {attr!r}"
            obj = getattr(obj, attr)
            home = getattr(obj, "__module__", None) if i == 0 else None
            if isinstance(home, str) and home != module_name and attr not in getattr(module, "__all__", ()):
                return f"{attr} is defined in {home}"
        return None
    return f"no module {parts[0]}"


def _spans(text: str) -> list[str]:
    """The code spans of the prose (a span may wrap a line, never a paragraph) and the lines of
    fenced blocks (commands: ``python -m hack.benchkit.profiled_main``)."""
    out, fenced, paragraph = [], False, []
    for line in text.splitlines() + [""]:
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            out.append(line)
        elif line.strip():
            paragraph.append(line)
        else:
            out.extend(CODE_SPAN.findall(" ".join(paragraph)))
            paragraph = []
    return out


def test_every_dotted_name_resolves():
    """Every module, class, function or attribute a doc names by its dotted path is there."""
    unresolved = set()
    for doc in _code_docs():
        for span in _spans(doc.read_text()):
            for name in dotted_names(span):
                if why := resolve(name):
                    unresolved.add(f"{name} (named in {_doc_id(doc)}): {why}")
    assert not unresolved, (f"{len(unresolved)} dotted name(s) in the docs do not resolve:\n"
                            + "\n".join(sorted(unresolved)))


@pytest.mark.parametrize("span, names", [
    ("controller.plan.gateway.gateway_status", ["controller.plan.gateway.gateway_status"]),
    ("python -m hack.benchkit.profiled_main", ["hack.benchkit.profiled_main"]),
    ("ovn.kubernetes.io/chassis", []),
    ("ovn.kubernetes.io/...", []),
    ("*.proxmox.cozystack.io", []),
    ("controller.log", []),
    ("controller.kubeconfig", []),
    ("ovn.nbAddress", []),
    ("--ovn-nb-address", []),
])
def test_what_counts_as_a_python_name(span, names):
    assert dotted_names(span) == names


def test_resolve_reports_a_missing_name_and_a_borrowed_one():
    assert resolve("controller.plan.gateway.gateway_status") is None
    assert resolve("ovn.nb.NBClient.snapshot") is None
    assert resolve("controller.rules.addresses.pool_cidrs") == "controller.rules has no 'addresses'"
    assert resolve("controller.entry.SignalStop") == "SignalStop is defined in controller.runtime.signals"
    assert resolve("informers.Resource") is None  # exported in informers.__all__
    assert resolve("hack.benchkit.profiled_main") is None  # a module; yappi, which it imports, may be missing


def _reasons() -> list[str]:
    return sorted({v for k, v in vars(reasons).items() if k.isupper() and isinstance(v, str)})


def test_every_reason_has_a_runbook_entry():
    entries = {re.sub(r"\s*\(.*\)$", "", h).strip("` ") for h in headings((REPO / "docs/runbook.md").read_text())}
    missing = [r for r in _reasons() if r not in entries]
    assert not missing, "reasons without a heading in docs/runbook.md: " + ", ".join(missing)


def test_every_shipped_alert_has_a_runbook_entry():
    """Each alert of the shipped PrometheusRule has a heading of its name in docs/runbook.md
    (the alerts' ``runbook_url`` anchors point there)."""
    rule = (REPO / "manifests/monitoring/prometheusrule.yaml").read_text()
    alerts = re.findall(r"^\s*-\s*alert:\s*(\S+)\s*$", rule, flags=re.M)
    assert len(alerts) >= 10  # the rule file read, not an empty match
    entries = {re.sub(r"\s*\(.*\)$", "", h).strip("` ") for h in headings((REPO / "docs/runbook.md").read_text())}
    missing = sorted(set(alerts) - entries)
    assert not missing, "alerts without a heading in docs/runbook.md: " + ", ".join(missing)


def test_doctor_points_at_the_runbook():
    assert doctor.RUNBOOK == "docs/runbook.md" and (REPO / doctor.RUNBOOK).exists()


@pytest.mark.parametrize("heading, anchor", [
    ("Memory and CPU at N=2000", "memory-and-cpu-at-n2000"),
    ("`ovn/nb.py`: `NBClient` and `RowIndex`", "ovnnbpy-nbclient-and-rowindex"),
    ("Observe → plan → apply", "observe--plan--apply"),
    ("Ready (zone)", "ready-zone"),
])
def test_slug_follows_githubs_rule(heading, anchor):
    assert slug(heading) == anchor
