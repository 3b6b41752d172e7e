"""A PEP 517 build backend of the standard library alone.

``pip install ./clients/python`` builds the package with this backend
(``[build-system]`` of pyproject.toml), which needs nothing beyond Python
itself: no setuptools and no wheel, so the install works offline in a
plain ``python3 -m venv`` (Debian's python3-venv) with no package index.
It writes only the wheel (or sdist) it is asked for, into the folder pip
gives it: nothing lands in the checkout (no build/, no *.egg-info).

It knows exactly this project: the package ``acme_platform`` in ``src/``
(every ``.py`` file and ``py.typed``), and the name, version, summary and
``requires-python`` of ``[project]`` in pyproject.toml.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile
from typing import Any, Dict, List, Optional, Tuple

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PACKAGE = "acme_platform"
_TAG = "py3-none-any"


def _project() -> Dict[str, str]:
    """The [project] strings of pyproject.toml that the metadata needs
    (tomllib is Python 3.11+; the client supports 3.9)."""
    with open(os.path.join(_ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    section = text.split("[project]", 1)[1].split("\n[", 1)[0]
    out = {}
    for key in ("name", "version", "description", "requires-python"):
        m = re.search(r"^%s\s*=\s*\"([^\"]*)\"" % re.escape(key), section, re.M)
        if m is None:
            raise RuntimeError(f"pyproject.toml: [project] has no {key}")
        out[key] = m.group(1)
    return out


def _dist_name(project: Dict[str, str]) -> str:
    return re.sub(r"[-_.]+", "_", project["name"]).lower() + "-" + project["version"]


def _metadata(project: Dict[str, str]) -> str:
    with open(os.path.join(_ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {project['name']}\n"
        f"Version: {project['version']}\n"
        f"Summary: {project['description']}\n"
        f"Requires-Python: {project['requires-python']}\n"
        "Classifier: Programming Language :: Python :: 3 :: Only\n"
        "Classifier: Typing :: Typed\n"
        "Description-Content-Type: text/markdown\n"
        "\n" + readme
    )


def _package_files() -> List[Tuple[str, str]]:
    """(path in the archive, path on disk) of the package's files."""
    src = os.path.join(_ROOT, "src", _PACKAGE)
    files = []
    for name in sorted(os.listdir(src)):
        if name.endswith(".py") or name == "py.typed":
            files.append((f"{_PACKAGE}/{name}", os.path.join(src, name)))
    return files


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[Dict[str, Any]] = None) -> List[str]:
    return []


def build_wheel(
    wheel_directory: str,
    config_settings: Optional[Dict[str, Any]] = None,
    metadata_directory: Optional[str] = None,
) -> str:
    project = _project()
    dist = _dist_name(project)
    info = f"{dist}.dist-info"
    entries: List[Tuple[str, bytes]] = []
    for arcname, path in _package_files():
        with open(path, "rb") as f:
            entries.append((arcname, f.read()))
    entries.append((f"{info}/METADATA", _metadata(project).encode()))
    entries.append(
        (
            f"{info}/WHEEL",
            (
                "Wheel-Version: 1.0\nGenerator: acme_build\n"
                f"Root-Is-Purelib: true\nTag: {_TAG}\n"
            ).encode(),
        )
    )
    entries.append((f"{info}/top_level.txt", f"{_PACKAGE}\n".encode()))
    record = [_record_line(name, data) for name, data in entries]
    record.append(f"{info}/RECORD,,")
    entries.append((f"{info}/RECORD", ("\n".join(record) + "\n").encode()))
    filename = f"{dist}-{_TAG}.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in entries:
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return filename


def build_sdist(sdist_directory: str, config_settings: Optional[Dict[str, Any]] = None) -> str:
    project = _project()
    dist = _dist_name(project)
    filename = f"{dist}.tar.gz"
    paths = ["pyproject.toml", "README.md", "build_backend/acme_build.py"]
    paths += [os.path.relpath(p, _ROOT) for _, p in _package_files()]
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        for rel in paths:
            tar.add(os.path.join(_ROOT, rel), arcname=f"{dist}/{rel}")
        pkg_info = _metadata(project).encode()
        ti = tarfile.TarInfo(f"{dist}/PKG-INFO")
        ti.size = len(pkg_info)
        tar.addfile(ti, io.BytesIO(pkg_info))
    return filename
