"""The image hack/build-image.sh builds has the layout Containerfile declares (issue 17 part 1).

Containerfile is how users build the image where a registry is reachable; this machine
cannot reach one, so hack/build-image.sh builds the same layout from Debian's packages
(mmdebstrap + buildah). Compared here: USER, ENTRYPOINT, WORKDIR, ENV, EXPOSE, the Python
major.minor (Containerfile's ``ARG PYTHON_VERSION``, which its build asserts) against the
image's venv, the venv's path, and every distribution in the venv against constraints.txt,
plus the project's packages and console scripts from pyproject.toml.

The ``image`` marker: needs the OCI archive of hack/build-image.sh (built by
hack/install-deps.sh; cached by content, so a changed tree rebuilds it: ~3 min cold).
"""

from __future__ import annotations

import email.parser
import gzip
import io
import json
import re
import shlex
import subprocess
import tarfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
VENV = "opt/venv"

pytestmark = [pytest.mark.image, pytest.mark.timeout(900)]


# --------------------------------------------------------------------------- Containerfile


@dataclass
class Declared:
    """What the last stage of Containerfile declares (instructions of the final FROM on)."""

    user: str = ""
    entrypoint: list[str] = field(default_factory=list)
    workdir: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    exposed: set[str] = field(default_factory=set)
    args: dict[str, str] = field(default_factory=dict)
    venv_from_build: str = ""


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def parse_containerfile(text: str) -> Declared:
    d = Declared()
    final = False
    froms = [i for i, (w, _) in enumerate(_instructions(text)) if w == "FROM"]
    for i, (word, rest) in enumerate(_instructions(text)):
        if word == "ARG" and "=" in rest and i < froms[0]:
            k, v = rest.split("=", 1)
            d.args[k.strip()] = v.strip()
        if word == "FROM":
            final = i == froms[-1]
            continue
        if not final:
            continue
        if word == "USER":
            d.user = rest
        elif word == "ENTRYPOINT":
            d.entrypoint = json.loads(rest)
        elif word == "WORKDIR":
            d.workdir = rest
        elif word == "ENV":
            for item in shlex.split(rest):
                k, v = item.split("=", 1)
                d.env[k] = v
        elif word == "EXPOSE":
            d.exposed.update(p if "/" in p else f"{p}/tcp" for p in rest.split())
        elif word == "COPY" and rest.startswith("--from="):
            src, dst = rest.split()[1:3]
            if src == dst:
                d.venv_from_build = dst
    return d


def test_parse_containerfile_reads_the_final_stage() -> None:
    d = parse_containerfile(
        "ARG PYTHON_VERSION=3.11\nFROM a AS build\nUSER 1\nENV X=1\nFROM b\n"
        "COPY --from=build /opt/venv /opt/venv\nENV A=1 \\\n  B=\"two words\"\nUSER 65532:65532\n"
        "WORKDIR /\nEXPOSE 8080 8081/udp\nENTRYPOINT [\"x\"]\n"
    )
    assert d == Declared(
        user="65532:65532", entrypoint=["x"], workdir="/", env={"A": "1", "B": "two words"},
        exposed={"8080/tcp", "8081/udp"}, args={"PYTHON_VERSION": "3.11"}, venv_from_build="/opt/venv",
    )


# --------------------------------------------------------------------------- the built image


@dataclass
class Image:
    config: dict
    files: dict[str, bytes]  # the few files read from the layers, by path without leading /
    names: set[str]  # every path in the layers, without leading /


def _wanted(path: str) -> bool:
    return (
        path == f"{VENV}/pyvenv.cfg"
        or path == "etc/debian_version"
        or bool(re.fullmatch(rf"{VENV}/lib/python3\.\d+/site-packages/[^/]+\.dist-info/METADATA", path))
    )


def read_oci_archive(archive: Path) -> Image:
    """The config and the files of :func:`_wanted` from an OCI archive (one manifest)."""
    with tarfile.open(archive) as outer:
        def blob(digest: str) -> bytes:
            algo, hexd = digest.split(":", 1)
            f = outer.extractfile(f"blobs/{algo}/{hexd}")
            assert f is not None
            return f.read()

        index = json.loads(outer.extractfile("index.json").read())  # type: ignore[union-attr]
        assert len(index["manifests"]) == 1, index
        manifest = json.loads(blob(index["manifests"][0]["digest"]))
        config = json.loads(blob(manifest["config"]["digest"]))
        files: dict[str, bytes] = {}
        names: set[str] = set()
        for layer in manifest["layers"]:
            data = blob(layer["digest"])
            if layer["mediaType"].endswith("+gzip"):
                data = gzip.decompress(data)
            with tarfile.open(fileobj=io.BytesIO(data)) as t:
                for m in t:
                    name = m.name.lstrip("./").lstrip("/")
                    names.add(name)
                    if m.isfile() and _wanted(name):
                        files[name] = t.extractfile(m).read()  # type: ignore[union-attr]
    return Image(config=config, files=files, names=names)


@pytest.fixture(scope="module")
def image() -> Image:
    proc = subprocess.run(
        ["bash", str(ROOT / "hack" / "build-image.sh")], capture_output=True, text=True, timeout=850
    )
    if proc.returncode != 0:
        pytest.fail(f"hack/build-image.sh failed:\n{proc.stderr[-3000:]}", pytrace=False)
    return read_oci_archive(Path(proc.stdout.strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def declared() -> Declared:
    return parse_containerfile((ROOT / "Containerfile").read_text())


def _env(config: dict) -> dict[str, str]:
    return dict(e.split("=", 1) for e in config["config"].get("Env", []))


def test_user_entrypoint_workdir_ports_and_env_are_the_declared_ones(image: Image, declared: Declared) -> None:
    cfg = image.config["config"]
    assert cfg["User"] == declared.user == "65532:65532"
    assert cfg["Entrypoint"] == declared.entrypoint == ["tini", "--", "proxmox-network-controller"]
    assert not cfg.get("Cmd")
    assert (cfg.get("WorkingDir") or "/") == declared.workdir
    assert set(cfg.get("ExposedPorts", {})) == declared.exposed
    assert _env(image.config) == declared.env
    assert image.config["architecture"] == "amd64" and image.config["os"] == "linux"


def test_the_entrypoint_is_the_venvs_console_script(image: Image, declared: Declared) -> None:
    venv_bin = f"{declared.venv_from_build}/bin"
    assert declared.env["PATH"].split(":")[0] == venv_bin
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for script in scripts:
        assert f"{venv_bin.lstrip('/')}/{script}" in image.names, script
    # Debian's tini as PID 1 (it forwards a SIGTERM that comes before Python's handler exists).
    assert declared.entrypoint[:2] == ["tini", "--"] and "usr/bin/tini" in image.names
    assert declared.entrypoint[2] in scripts


def test_python_major_minor_is_the_declared_one_on_debian_bookworm(image: Image, declared: Declared) -> None:
    cfg = dict(
        line.split(" = ", 1) for line in image.files[f"{VENV}/pyvenv.cfg"].decode().splitlines() if " = " in line
    )
    assert cfg["home"] == "/usr/bin"  # Debian's python3, not one of its own
    assert ".".join(cfg["version"].split(".")[:2]) == declared.args["PYTHON_VERSION"]
    assert image.files["etc/debian_version"].decode().startswith("12.")  # bookworm, as the FROM lines


def _installed(image: Image) -> dict[str, str]:
    out: dict[str, str] = {}
    for path, data in image.files.items():
        if path.endswith("/METADATA"):
            msg = email.parser.BytesHeaderParser().parsebytes(data)
            out[canonicalize_name(msg["Name"])] = msg["Version"]
    return out


def _pins() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = version
    return pins


def test_installed_versions_are_exactly_the_constraints(image: Image) -> None:
    installed = _installed(image)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert installed.pop(canonicalize_name(project["name"])) == project["version"]
    # pip and setuptools come with Debian's venv (ensurepip), not from PyPI.
    bundled = {n: installed.pop(n) for n in ("pip", "setuptools") if n in installed}
    assert set(bundled) == {"pip", "setuptools"}
    pins = _pins()
    build_only = {"setuptools", "wheel"}
    assert installed == {n: v for n, v in pins.items() if n not in build_only}


def test_the_projects_packages_are_installed(image: Image) -> None:
    site = next(n for n in image.names if re.fullmatch(rf"{VENV}/lib/python3\.\d+/site-packages", n.rstrip("/")))
    site = site.rstrip("/")
    # Every package of the checkout that pyproject.toml's find includes, sub-packages too.
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = sorted(str(i.parent.relative_to(ROOT)) for top in include if "*" not in top
                      for i in (ROOT / top).rglob("__init__.py"))
    assert "controller/plan" in packages and "controller/runtime" in packages
    for pkg in packages:
        assert f"{site}/{pkg}/__init__.py" in image.names, pkg
        # compiled at install: a read-only root filesystem never needs to write bytecode
        assert any(n.startswith(f"{site}/{pkg}/__pycache__/") and n.endswith(".pyc") for n in image.names), pkg
