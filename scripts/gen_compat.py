#!/usr/bin/env python
"""Generate the per-release compatibility facts of the vendor plugins (torch, Python, runtime, glibc) into
src/torch_fl/description/compat/<chip>.json, from the vendors' own published sources, each named in the
file with the commit or the file's sha256 it was read from.

  npu (torch_npu, on PyPI): every final release from 2.1.0.post8 on.
      pypi     the wheels' METADATA (Requires-Dist torch pin, Requires-Python, classifiers), read from one
               wheel per release by HTTP range requests on its zip directory (a few kB, not the wheel), and
               the release's file list (the cpXY tags and manylinux tags of every wheel).
      table    Ascend/pytorch COMPATIBILITY.en.md at a commit of a fetched clone: TorchNPU package version
               -> PyTorch version and CANN version, and the PyTorch -> Python table. (The README's "Supported
               Versions" section points there: at 9e73e70 the README itself has no version table.)
      readme   the CANN table of each wheel's README copy (its METADATA description): frozen when the wheel
               was built, so it stops short of later releases; used where the table has no row.
  mlu (torch_mlu, not on PyPI): Cambricon/torch_mlu release branches r1.22_ptX.Y.0: scripts/release/
      build.property (version, driver_requires, build_requires: cntoolkit, cnnl, cncl).
  musa (torch_musa, not on PyPI): MooreThreads/torch_musa release tags: version.txt, build.sh PYTORCH_TAG
      (the torch it is built against), and the MUSA SDK version its README names.
  cuda, rocm, xpu (torch's own builds, no plugin): what runtime each torch release is built for and what that
      runtime needs from the driver.
      cuda     every torch release's PyPI Linux x86_64 wheel METADATA (its CUDA runtime pin, read like torch_npu's),
               PyTorch's Release Compatibility Matrix (the CUDA builds of each minor release), NVIDIA's minor
               version compatibility floors per CUDA major and the release notes' driver per toolkit.
      rocm     PyTorch's matrix (the ROCm of each minor release's wheels) and AMD's third-party support matrix.
      xpu      the oneAPI each torch xpu build links (PyTorch's build matrix, a PyTorch PR, HF kernels' variants).
      Their published sources are web pages and a table in pytorch/pytorch (4 GB, over the fetch limit), read
      through the search tool's stored copies: restated below as data (TORCH_MINORS, CUDA_FLOORS, ...), each
      source record naming the URL, when and how it was read.
  installed  how to find the vendor toolkit installed beside each plugin (INSTALLED: env variables, default
      roots, version files and their format), written into the chip's file for analysis/installed.py.

Where sources disagree, each release says which source won and why (its `decisions`):
  torch   the wheel's Requires-Dist pin wins over the table: pip enforces the pin, the table is prose.
  python  the wheels' cpXY tags win over the classifiers and the table: a Python with no wheel cannot install
          the release, and a listed one with no wheel is a documentation error.
  runtime (CANN) only the table has it; a release the table does not list has no runtime fact (no guess).
  glibc   the wheels' manylinux tags (manylinux_2_17: glibc >= 2.17), the only source.

Usage:
  gen_compat.py --chip npu --repo Ascend/pytorch=GITDIR [--cache DIR]
  gen_compat.py --chip mlu --repo Cambricon/torch_mlu=GITDIR
  gen_compat.py --chip musa --repo MooreThreads/torch_musa=GITDIR
  gen_compat.py --chip cuda --chip rocm --chip xpu [--cache DIR]
  gen_compat.py --verify ...   regenerate and compare with the checked-in file (exit 1 when they differ)

PyPI is read through the JSON API (https://pypi.org/pypi/torch-npu/json, relative file URLs resolved
against it); --cache keeps what was read, so a second run (and --verify) needs no network.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import re
import subprocess
import sys
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from email.message import Message
from email.parser import Parser
from pathlib import Path
from typing import Any

OUT_DIR = Path(__file__).resolve().parent.parent / "src/torch_fl/description/compat"
PYPI = "https://pypi.org/pypi/{name}/json"
NPU_FIRST = (2, 1, 0, 8)  # 2.1.0.post8: the oldest release the facts cover
_WHEEL = re.compile(r"^(?P<dist>[^-]+)-(?P<version>[^-]+)-(?P<py>[^-]+)-(?P<abi>[^-]+)-(?P<plat>.+)\.whl$")
_MANYLINUX = re.compile(r"manylinux_(\d+)_(\d+)|manylinux(2014|2010|1)")
_LEGACY = {"2014": "2.17", "2010": "2.12", "1": "2.5"}


# Sources ------------------------------------------------------------------------------------------
def git_show(gitdir: str, ref: str, path: str) -> str:
    return subprocess.run(["git", f"--git-dir={gitdir}", "show", f"{ref}:{path}"], check=True,
                          capture_output=True, text=True).stdout


def git_rev(gitdir: str, ref: str) -> str:
    return subprocess.run(["git", f"--git-dir={gitdir}", "rev-parse", f"{ref}^{{commit}}"], check=True,
                          capture_output=True, text=True).stdout.strip()


class _Ranged(io.RawIOBase):
    """A remote file read by HTTP range requests: zipfile reads the directory at the end, then one member."""

    def __init__(self, url: str, size: int):
        self.url, self.size, self.pos = url, size, 0

    def seekable(self) -> bool:
        return True

    def readable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def readinto(self, buffer) -> int:
        if self.pos >= self.size:
            return 0
        end = min(self.size, self.pos + len(buffer)) - 1
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{end}"})
        with urllib.request.urlopen(request, timeout=120) as response:
            data = response.read()
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


class Cache:
    """What was read from the network, kept as files so a second run needs none."""

    def __init__(self, folder: Path | None):
        self.folder = folder
        if folder:
            folder.mkdir(parents=True, exist_ok=True)

    def get(self, key: str, fetch) -> str:
        path = self.folder / re.sub(r"[^A-Za-z0-9_.-]", "_", key) if self.folder else None
        if path is not None and path.exists():
            return path.read_text(encoding="utf-8")
        text = fetch()
        if path is not None:
            path.write_text(text, encoding="utf-8")
        return text


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=120) as response:
        return response.read().decode("utf-8")


def wheel_metadata(url: str, size: int) -> str:
    with zipfile.ZipFile(io.BufferedReader(_Ranged(url, size), buffer_size=1 << 16)) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        return archive.read(name).decode("utf-8")


def version_key(version: str) -> tuple[int, ...]:
    """2.1.0.post8 -> (2, 1, 0, 8); 2.5.1 -> (2, 5, 1, -1): a post release sorts after its base."""
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?", version)
    if not match:
        return ()
    major, minor, patch, post = match.groups()
    return (int(major), int(minor), int(patch), int(post) if post is not None else -1)


def pypi_releases(cache: Cache, name: str, first: tuple[int, ...], keep: Callable[[str], bool],
                  prefer: Callable[[str], tuple[Any, ...]], finals_only: bool = False
                  ) -> Iterator[tuple[str, list[dict[str, Any]], Message, dict[str, str]]]:
    """Each release of NAME on PyPI from `first` on (no post release with `finals_only`) that has a wheel
    `keep` takes by file name: its version, those wheels, the METADATA of the one `prefer` ranks first (read
    by HTTP range requests, kept in the cache) and what every chip's facts say of it (which wheel, the
    METADATA's sha256, its Requires-Python, the release's first upload day)."""
    url = PYPI.format(name=name)
    index = json.loads(cache.get(f"pypi-{name}.json", lambda: _get(url)))
    for version, files in index["releases"].items():
        key = version_key(version)
        if not key or key < first or (finals_only and key[3] != -1) or not files:
            continue
        wheels = [f for f in files if f["filename"].endswith(".whl") and keep(f["filename"])]
        if not wheels:
            continue
        pick = min(wheels, key=lambda f: prefer(f["filename"]))
        file_url = urllib.parse.urljoin(url, pick["url"])
        text = cache.get(f"METADATA-{pick['filename']}", lambda u=file_url, s=pick["size"]: wheel_metadata(u, s))
        meta = Parser().parsestr(text)
        yield version, wheels, meta, {
            "metadata_of": f"{pick['filename']} sha256:{pick['digests']['sha256']}",
            "metadata_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "requires_python": meta.get("Requires-Python") or "",
            "uploaded": min(f["upload_time"] for f in files)[:10]}


# npu ----------------------------------------------------------------------------------------------
def npu_pypi(cache: Cache) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """release -> facts read from PyPI; and the source record."""
    url = PYPI.format(name="torch-npu")
    releases: dict[str, dict[str, Any]] = {}
    for version, wheels, meta, read in pypi_releases(
            cache, "torch-npu", NPU_FIRST, keep=lambda name: True,
            prefer=lambda name: ("cp311" not in name, "x86_64" not in name, name)):
        requires = meta.get_all("Requires-Dist") or []
        releases[version] = {
            "readme_cann": readme_cann(meta.get_payload() or ""),
            **read,
            "requires_torch": next((r.split(";")[0].strip()[len("torch"):].strip(" ()") for r in requires
                                    if re.match(r"torch\b(?![-_])", r)), ""),
            "classifier_pythons": sorted({c.rsplit("::", 1)[1].strip() for c in meta.get_all("Classifier") or []
                                          if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)},
                                         key=_py_key),
            "wheel_pythons": sorted({_py(m.group("py")) for f in wheels if (m := _WHEEL.match(f["filename"]))},
                                    key=_py_key),
            "platforms": sorted({_platform(m.group("plat")) for f in wheels
                                 if (m := _WHEEL.match(f["filename"]))}),
        }
    source = {"id": "pypi", "what": "the wheels' METADATA and file lists of every torch-npu release on PyPI",
              "url": url, "releases": str(len(releases))}
    return releases, source


README_SOURCE = {"id": "readme", "what": "the CANN table in each wheel's README copy (its METADATA description, "
                 "read with the METADATA above); per release: which wheels' copies list it, in wheel_readmes"}


def readme_cann(text: str) -> dict[str, list[str]]:
    """The CANN table of a wheel's README copy (its METADATA description): extension version -> [CANN,
    branch].

    Two layouts: 'CANN Version | PyTorch | Extension Version | Branch' (a blank CANN cell continues the
    row above) and the later 'package version | Branch | PyTorch | CANN version'."""
    found: dict[str, list[str]] = {}
    cann = ""
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or (cells[0] and set(cells[0]) <= set("-: ")):
            continue
        if re.match(r"CANN \d", cells[0]) or (cells[0] == "" and cann):
            cann = cells[0][5:] if cells[0] else cann
            found.setdefault(cells[2].split(" ")[0], [cann, cells[3]])
        elif re.match(r"CANN \d", cells[3]):
            found.setdefault(cells[0].split(" ")[0], [cells[3][5:], cells[1]])
    return found


def _py(tag: str) -> str:
    digits = tag[2:]
    return f"{digits[0]}.{digits[1:]}"


def _py_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _platform(tag: str) -> str:
    """'manylinux_2_17_x86_64.manylinux2014_x86_64' -> 'x86_64 glibc>=2.17'."""
    arch = "aarch64" if "aarch64" in tag else "x86_64" if "x86_64" in tag else tag
    match = _MANYLINUX.search(tag)
    if not match:
        return arch
    glibc = f"{match.group(1)}.{match.group(2)}" if match.group(1) else _LEGACY[match.group(3)]
    return f"{arch} glibc>={glibc}"


def npu_table(gitdir: str, ref: str = "HEAD") -> tuple[dict[str, dict[str, str]], dict[str, list[str]], dict[str, str]]:
    """COMPATIBILITY.en.md: package version -> {branch, torch, cann}; torch -> Pythons; the source record."""
    path = "COMPATIBILITY.en.md"
    text = git_show(gitdir, ref, path)
    rows: dict[str, dict[str, str]] = {}
    pythons: dict[str, list[str]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[3].startswith("CANN "):
            version = cells[0].split(" ")[0]
            rows.setdefault(version, {"branch": cells[1], "torch": cells[2], "cann": cells[3][5:]})
        elif len(cells) == 2 and cells[0].startswith("PyTorch "):
            pythons[cells[0][8:]] = sorted(set(re.findall(r"3\.\d+", cells[1])), key=_py_key)
    source = {"id": "table", "what": "the TorchNPU / PyTorch / CANN table and the PyTorch / Python table",
              "repo": "Ascend/pytorch", "commit": git_rev(gitdir, ref), "path": path,
              "sha256": hashlib.sha256(text.encode()).hexdigest()}
    return rows, pythons, source


def npu_facts(cache: Cache, gitdir: str) -> dict[str, Any]:
    pypi, pypi_source = npu_pypi(cache)
    table, table_pythons, table_source = npu_table(gitdir)
    releases = []
    readmes = {v: w["readme_cann"] for v, w in pypi.items()}
    # The branch v2.9.0-26.0.0 is the Ascend release 26.0.0; the table maps each such release to one CANN.
    release_cann = {row["branch"].split("-", 1)[1]: row["cann"] for row in table.values() if "-" in row["branch"]}
    for version in sorted(pypi, key=version_key):
        wheel, row = pypi[version], table.get(version)
        decisions = []
        torch_pin = wheel["requires_torch"]
        torch_spec = _spec(torch_pin)
        if not torch_pin and row is not None:
            torch_spec = f"=={row['torch']}"
            decisions.append(f"torch: the wheel pins no torch; the table's {row['torch']} taken")
        if row is not None and torch_pin and not _pin_covers(torch_pin, row["torch"]):
            decisions.append(f"torch: the wheel pins {torch_pin}, the table says {row['torch']}; the wheel's pin "
                             f"won (pip enforces it)")
        pythons = wheel["wheel_pythons"]
        classifiers = wheel["classifier_pythons"]
        if classifiers and classifiers != pythons:
            decisions.append(f"python: wheels for {', '.join(pythons)}, classifiers list {', '.join(classifiers)}; "
                             f"the wheels won (only a Python with a wheel can install it)")
        listed = table_pythons.get(row["torch"] if row else _torch_of(torch_pin), [])
        if listed and listed != pythons:
            decisions.append(f"python: wheels for {', '.join(pythons)}, the table lists {', '.join(listed)} for "
                             f"PyTorch {row['torch'] if row else _torch_of(torch_pin)}; the wheels won")
        copies = {other: found[version][0] for other, found in readmes.items() if version in found}
        branches = {found[version][1] for found in readmes.values() if version in found}
        runtime = row["cann"] if row else ""
        differing = sorted({c for c in copies.values() if c != runtime}) if runtime else []
        if differing:
            decisions.append(f"runtime: the table says CANN {runtime}, the README copy in wheel(s) "
                             f"{', '.join(v for v, c in copies.items() if c != runtime)} says "
                             f"{', '.join(differing)}; the table won (the repository's current text; a wheel's "
                             f"copy is frozen when it was built)")
        if not runtime and copies:
            newest = max(copies, key=version_key)
            said = copies[newest]
            branch = next(iter(sorted(branches)), "")
            ascend = branch.split("-", 1)[1] if "-" in branch else ""
            if said == ascend and ascend in release_cann:
                runtime = release_cann[ascend]
                decisions.append(f"runtime: the table does not list this release; the README copy of wheel {newest} "
                                 f"says 'CANN {said}', which is the Ascend release of its branch {branch}, and the "
                                 f"table maps every branch of Ascend release {ascend} to CANN {runtime}: CANN "
                                 f"{runtime} taken (the README cell names the release, not CANN)")
            else:
                runtime = said
                decisions.append(f"runtime: the table does not list this release; the README copy of wheel "
                                 f"{newest} says CANN {said} (taken: the only source)")
        elif not runtime:
            decisions.append("runtime: neither the table nor any wheel's README copy lists this release (the "
                             "copies stop short of it), so its CANN version is unknown (not guessed from a "
                             "neighbour)")
        releases.append({
            "plugin": version, "torch": torch_spec, "python": pythons,
            "runtime": runtime, "runtime_name": "CANN",
            "platforms": wheel["platforms"], "uploaded": wheel["uploaded"],
            "branch": row["branch"] if row else next(iter(sorted(branches)), ""),
            "sources": {"pypi": {k: wheel[k] for k in ("metadata_of", "metadata_sha256", "requires_torch",
                                                       "requires_python", "classifier_pythons",
                                                       "wheel_pythons")},
                        "table": row or {},
                        "wheel_readmes": _summary(copies)},
            "decisions": decisions,
        })
    return {"chip": "npu", "plugin": "torch_npu", "distribution": "torch-npu", "runtime_name": "CANN",
            "install": "pip install torch=={torch} torch-npu=={plugin}",
            "sources": [pypi_source, table_source, {**README_SOURCE, "url": pypi_source["url"]}],
            "releases": releases}


def _summary(copies: dict[str, str]) -> dict[str, str]:
    """CANN value -> which wheels' README copies say it: 'N wheels, FIRST .. LAST'."""
    by_value: dict[str, list[str]] = {}
    for wheel, cann in copies.items():
        by_value.setdefault(cann, []).append(wheel)
    return {cann: f"{len(w)} wheel(s), {min(w, key=version_key)} .. {max(w, key=version_key)}"
            for cann, w in sorted(by_value.items())}


def _spec(pin: str) -> str:
    """'==2.5.1' stays; '==2.14.0.*' -> '==2.14.0.*'; '' -> ''."""
    return pin.replace(" ", "")


def _torch_of(pin: str) -> str:
    match = re.search(r"(\d+\.\d+\.\d+)", pin)
    return match.group(1) if match else ""


def _pin_covers(pin: str, torch_version: str) -> bool:
    return _torch_of(pin) == torch_version


# mlu ----------------------------------------------------------------------------------------------
def mlu_facts(gitdir: str) -> dict[str, Any]:
    branches = sorted(b for b in _refs(gitdir, "refs/heads") if re.fullmatch(r"r\d+\.\d+_pt\d+\.\d+\.\d+", b))
    releases, sources = [], []
    for branch in branches:
        path = "scripts/release/build.property"
        prop = json.loads(git_show(gitdir, branch, path))
        version = prop["version"].replace("-", "+")  # setup.py: json_dict["version"].replace("-", "+")
        torch_version = version.split("+torch", 1)[1]
        needs = prop.get("build_requires", {})
        commit = git_rev(gitdir, branch)
        sources.append({"id": f"branch:{branch}", "repo": "Cambricon/torch_mlu", "commit": commit, "path": path})
        releases.append({
            "plugin": version, "torch": f"=={torch_version}", "python": [],
            "runtime": needs.get("cntoolkit", ["", ""])[1].split("-")[0], "runtime_name": "CNToolkit",
            "driver": prop.get("driver_requires", ["", ""])[1].split("-")[0],
            "libraries": {k: v[1] for k, v in needs.items() if k in ("cnnl", "cncl", "cncv", "mluops")},
            "platforms": [], "branch": branch,
            "sources": {f"branch:{branch}": {"version": prop["version"]}},
            "decisions": ["python: the release branch names none (its wheels come from Cambricon's site), so no "
                          "Python fact", "driver: build.property's driver_requires is the minimum driver"],
        })
    return {"chip": "mlu", "plugin": "torch_mlu", "distribution": "torch_mlu", "runtime_name": "CNToolkit",
            "install": "pip install torch=={torch} torch_mlu=={plugin}  # wheels from Cambricon's download site",
            "sources": sources, "releases": releases}


# musa ---------------------------------------------------------------------------------------------
def musa_facts(gitdir: str) -> dict[str, Any]:
    tags = sorted((t for t in _refs(gitdir, "refs/tags") if re.fullmatch(r"v\d+\.\d+\.\d+(-pt\d+)?", t)),
                  key=lambda t: [int(x) for x in re.findall(r"\d+", t)])
    releases, sources = [], []
    for tag in tags:
        try:
            build = git_show(gitdir, tag, "build.sh")
        except subprocess.CalledProcessError:
            continue
        match = re.search(r"^PYTORCH_TAG=v(\S+)", build, re.M)
        if not match:
            continue
        readme = git_show(gitdir, tag, "README.md")
        sdk = re.search(r"MUSA SDK (\d+\.\d+\.\d+)", readme)
        version = git_show(gitdir, tag, "version.txt").strip() if _has(gitdir, tag, "version.txt") else tag[1:]
        sources.append({"id": f"tag:{tag}", "repo": "MooreThreads/torch_musa", "commit": git_rev(gitdir, tag),
                        "path": "build.sh, README.md, version.txt"})
        decisions = [] if sdk else ["runtime: the README of this tag names no MUSA SDK version, so no runtime fact"]
        if sdk:
            decisions.append(f"runtime: the README names MUSA SDK {sdk.group(1)} (its note on MCCL); taken as the "
                             f"SDK the release was made with")
        releases.append({"plugin": version, "tag": tag, "torch": f"=={match.group(1)}", "python": [],
                         "runtime": sdk.group(1) if sdk else "", "runtime_name": "MUSA SDK", "platforms": [],
                         "sources": {f"tag:{tag}": {"PYTORCH_TAG": f"v{match.group(1)}",
                                                    "readme_sdk": sdk.group(1) if sdk else ""}},
                         "decisions": decisions})
    return {"chip": "musa", "plugin": "torch_musa", "distribution": "torch_musa", "runtime_name": "MUSA SDK",
            "install": "pip install torch=={torch} torch_musa=={plugin}  # wheels from the GitHub release page",
            "sources": sources, "releases": releases}


def _refs(gitdir: str, prefix: str) -> list[str]:
    out = subprocess.run(["git", f"--git-dir={gitdir}", "for-each-ref", "--format=%(refname:short)", prefix],
                         check=True, capture_output=True, text=True).stdout
    return [r.split("/", 1)[-1] if r.startswith("origin/") else r for r in out.split()]


def _has(gitdir: str, ref: str, path: str) -> bool:
    return subprocess.run(["git", f"--git-dir={gitdir}", "cat-file", "-e", f"{ref}:{path}"],
                          capture_output=True).returncode == 0


# torch builds (cuda, rocm, xpu) ------------------------------------------------------------------
# These facts are about torch itself: the runtime a torch wheel is built for, and the driver that runtime needs.
# Their published sources are web pages and a table in a repository too large to fetch here (pytorch/pytorch,
# 4 GB), read through the search tool's stored copies; what was read is restated below as data, each with its
# source, and the PyPI part is re-read by this script (the wheels' METADATA, like torch_npu's).
PYTORCH_MATRIX = {
    "id": "pytorch-matrix", "what": "PyTorch's Release Compatibility Matrix: Python range, stable and experimental "
    "CUDA, stable ROCm per minor release", "url": "https://github.com/pytorch/pytorch/blob/main/RELEASE.md"
    "#release-compatibility-matrix", "read": "2026-12-05, the only stored copy of the table found with the search "
    "tool (find_string: a fork's translated RELEASE.md that keeps the table in English); pytorch/pytorch itself is "
    "over the fetch limit. Cross-checked: the CUDA every PyPI wheel 2.1.0 .. 2.14.1 pins is among its minor "
    "release's CUDA here", "restated_in": "scripts/gen_compat.py TORCH_MINORS"}
# minor -> (Python range, stable CUDA, experimental CUDA, stable ROCm)
TORCH_MINORS: dict[str, tuple[str, list[str], list[str], str]] = {
    "2.1": (">=3.8,<=3.11", ["11.8"], ["12.1"], "5.6"),
    "2.2": (">=3.8,<=3.11", ["11.8"], ["12.1"], "5.7"),
    "2.3": (">=3.8,<=3.11", ["11.8"], ["12.1"], "6.0"),
    "2.4": (">=3.8,<=3.12", ["11.8", "12.1"], ["12.4"], "6.1"),
    "2.5": (">=3.9,<=3.12", ["11.8", "12.1", "12.4"], [], "6.2"),
    "2.6": (">=3.9,<=3.13", ["11.8", "12.4"], ["12.6"], "6.2.4"),
    "2.7": (">=3.9,<=3.13", ["11.8", "12.6"], ["12.8"], "6.3"),
    "2.8": (">=3.9,<=3.13", ["12.6", "12.8"], ["12.9"], "6.4"),
    "2.9": (">=3.10,<=3.14", ["12.6", "12.8"], ["13.0"], "6.4"),
    "2.10": (">=3.10,<=3.14", ["12.6", "12.8"], ["13.0"], "7.1"),
    "2.11": (">=3.10,<=3.14", ["12.6", "12.8", "13.0"], [], "7.2"),
    "2.12": (">=3.10,<=3.14", ["12.6", "13.0"], ["13.2"], "7.2"),
    "2.13": (">=3.10,<=3.15", ["12.6", "13.0"], ["13.2"], "7.2"),
    "2.14": (">=3.10,<=3.15", ["12.6", "13.0", "13.2"], [], "7.14"),
}
NVIDIA_MINOR_COMPAT = {
    "id": "nvidia-minor-compat", "what": "NVIDIA's CUDA Compatibility guide, 'Minor Version Compatibility': the "
    "lowest driver of each CUDA major family (CUDA 11 and later run on it with a limited feature set)",
    "url": "https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html",
    "read": "2026-12-05, the stored copy found with the search tool (docs/pages corpora)",
    "restated_in": "scripts/gen_compat.py CUDA_FLOORS"}
CUDA_FLOORS = {"11": "450.80.02", "12": "525", "13": "580"}
NVIDIA_TOOLKIT_DRIVERS = {
    "id": "nvidia-release-notes", "what": "NVIDIA's CUDA Toolkit Release Notes, table 'CUDA Toolkit and "
    "Corresponding Driver Versions' (GA rows, Linux x86_64): the driver each toolkit ships with, which every "
    "feature of that toolkit (PTX JIT of its code among them) needs",
    "url": "https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html",
    "read": "2026-12-05, the whole table (CUDA 7.0 .. 13.2 Update 2) in a stored copy of the CUDA 13.2 release "
    "notes found with the search tool (find_string '>=570.26'); docs.nvidia.com itself is not reachable from this "
    "machine. The GA row of each CUDA minor release is restated",
    "restated_in": "scripts/gen_compat.py CUDA_TOOLKIT_DRIVERS"}
CUDA_TOOLKIT_DRIVERS = {"11.6": "510.39.01", "11.7": "515.43.04", "11.8": "520.61.05", "12.0": "525.60.13",
                        "12.1": "530.30.02", "12.2": "535.54.03", "12.3": "545.23.06", "12.4": "550.54.14",
                        "12.5": "555.42.02", "12.6": "560.28.03", "12.8": "570.26", "12.9": "575.51.03",
                        "13.0": "580.65.06", "13.1": "590.44.01", "13.2": "595.45.04"}
AMD_MATRIX = {
    "id": "rocm-third-party-matrix", "what": "AMD's ROCm third-party support matrix: the PyTorch releases AMD "
    "validated per ROCm release (its own builds: Docker images, repo.radeon.com wheels)",
    "url": "https://rocm.docs.amd.com/projects/install-on-linux/en/docs-6.3.0/reference/3rd-party-support-matrix"
    ".html", "read": "2026-12-05, the stored copy found with the search tool (docs corpus); it stops at ROCm 6.3.x",
    "restated_in": "scripts/gen_compat.py ROCM_VALIDATED"}
AMD_KERNEL_MATRIX = {
    "id": "rocm-kernel-matrix", "what": "AMD's user and kernel-space support matrix: ROCm's kernel-mode driver and "
    "user space are compatible for +/- 2 releases", "url": "https://rocm.docs.amd.com/projects/install-on-linux/en/"
    "docs-6.3.0/reference/user-kernel-space-compat-matrix.html", "read": "2026-12-05, the stored copy found with "
    "the search tool (docs corpus)"}
ROCM_VALIDATED = {"5.6": ["1.12.1", "1.13", "2.0", "2.1"], "5.7": ["1.12.1", "1.13", "2.0", "2.1"],
                  "6.0": ["1.13", "2.0", "2.1"], "6.1": ["1.13", "2.0", "2.1"],
                  "6.2": ["1.13", "2.0", "2.1", "2.2", "2.3"], "6.3": ["1.13", "2.0", "2.1", "2.2", "2.3", "2.4"]}
XPU_SOURCES = [
    {"id": "pytorch-build-matrix", "what": "pytorch/pytorch .github/scripts/generate_binary_build_matrix.py, "
     "PYTORCH_EXTRA_INSTALL_REQUIREMENTS['xpu'] (the xpu wheel's Requires-Dist: intel-sycl-rt, "
     "intel-cmplr-lib-rt pins) at the 2.7 cycle (CUDA 11.8/12.6/12.8, ROCm 6.2.4/6.3)",
     "repo": "pytorch/pytorch", "commit": "00018c9487224886f1c839167a56f4471ab1ebc4",
     "path": ".github/scripts/generate_binary_build_matrix.py", "read": "2026-12-05 through the search tool's "
     "file index", "restated_in": "scripts/gen_compat.py XPU_ONEAPI"},
    {"id": "pytorch-pr-138904", "what": "pytorch/pytorch pull request 138904: 'oneAPI 2025, targeted for PT 2.6'",
     "url": "https://github.com/pytorch/pytorch/pull/138904", "restated_in": "scripts/gen_compat.py XPU_ONEAPI"},
    {"id": "hf-kernels-variants", "what": "Hugging Face kernels' build variants: torch28-cxx11-xpu20251, "
     "torch29-...-xpu20252, torch210/211/212-...-xpu20253 (the oneAPI each torch xpu build links)",
     "url": "https://huggingface.co/docs/kernels/builder/build-variants", "read": "2026-12-05, stored copies found "
     "with the search tool (pages corpus)", "restated_in": "scripts/gen_compat.py XPU_ONEAPI"},
    {"id": "pytorch-xpu-docs", "what": "PyTorch 'Getting Started on Intel GPU': the Intel GPU driver is needed; "
     "no driver version is named per release", "url": "https://docs.pytorch.org/docs/stable/notes/"
     "get_start_xpu.html"},
]
# minor -> (oneAPI / intel-sycl-rt version, source id)
XPU_ONEAPI = {"2.6": ("2025.0", "pytorch-pr-138904"), "2.7": ("2025.0.4", "pytorch-build-matrix"),
              "2.8": ("2025.1", "hf-kernels-variants"), "2.9": ("2025.2", "hf-kernels-variants"),
              "2.10": ("2025.3", "hf-kernels-variants"), "2.11": ("2025.3", "hf-kernels-variants"),
              "2.12": ("2025.3", "hf-kernels-variants")}
WHL = "https://download.pytorch.org/whl/{variant}"
TORCH_FIRST = (2, 1, 0, -1)


def torch_pypi(cache: Cache) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """torch release -> the CUDA runtime its PyPI Linux x86_64 wheel pins, its Pythons; and the source record."""
    url = PYPI.format(name="torch")
    found: dict[str, dict[str, Any]] = {}
    for version, linux, meta, read in pypi_releases(
            cache, "torch", TORCH_FIRST, keep=lambda name: "manylinux" in name and "x86_64" in name,
            prefer=lambda name: ("cp311" not in name, name), finals_only=True):
        # the CUDA runtime pin: nvidia-cuda-runtime-cuXX==V up to 2.10, cuda-toolkit[cudart,...]==V from 2.11
        runtime = next((m.group(1) for r in meta.get_all("Requires-Dist") or []
                        if (m := re.match(r"(?:nvidia-cuda-runtime-cu\d+|cuda-toolkit\[[^\]]*\bcudart\b[^\]]*\])"
                                          r"\s*\(?==\s*([\w.]+)", r))), "")
        found[version] = {"cuda_runtime": runtime, **read,
                          "wheel_pythons": sorted({_py(m.group("py")) for f in linux
                                                   if (m := _WHEEL.match(f["filename"])) and m.group("py")[2:].isdigit()},
                                                  key=_py_key)}
    source = {"id": "pypi", "what": "the METADATA of each torch release's Linux x86_64 wheel on PyPI (the "
              "nvidia-cuda-runtime pin: the CUDA a plain `pip install torch` gets) and its file list",
              "url": url, "releases": str(len(found))}
    return found, source


def _minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def cuda_facts(cache: Cache) -> dict[str, Any]:
    pypi, pypi_source = torch_pypi(cache)
    releases = []
    for version in sorted(pypi, key=version_key):
        wheel, row = pypi[version], TORCH_MINORS.get(_minor(version))
        pinned = _minor(wheel["cuda_runtime"]) if wheel["cuda_runtime"] else ""
        stable, experimental = (row[1], row[2]) if row else ([], [])
        decisions = []
        if not row:
            decisions.append(f"variants: the matrix has no {_minor(version)} row, so only the PyPI wheel's CUDA "
                             f"{pinned or '?'} is known for this release")
        elif pinned and pinned not in stable + experimental:
            decisions.append(f"pypi: the PyPI wheel pins CUDA {pinned}, which the matrix does not list for "
                             f"{_minor(version)}; the pin won (pip installs it)")
        variants = sorted(set(stable + experimental + ([pinned] if pinned else [])), key=_py_key)
        releases.append({
            "torch": version, "python": wheel["wheel_pythons"], "runtime": pinned, "runtime_name": "CUDA",
            "variants": variants, "experimental": experimental,
            "index": {v: WHL.format(variant=f"cu{v.replace('.', '')}") for v in variants if v != pinned},
            "uploaded": wheel["uploaded"],
            "sources": {"pypi": {k: wheel[k] for k in ("metadata_of", "metadata_sha256", "cuda_runtime",
                                                       "requires_python", "wheel_pythons")},
                        "pytorch-matrix": {"python": row[0], "stable": row[1], "experimental": row[2]} if row else {}},
            "decisions": decisions})
    drivers = {v: {"floor": CUDA_FLOORS.get(v.split(".")[0], ""), "toolkit": CUDA_TOOLKIT_DRIVERS.get(v, "")}
               for v in sorted({v for r in releases for v in r["variants"]} | set(CUDA_TOOLKIT_DRIVERS), key=_py_key)}
    return {"chip": "cuda", "plugin": "", "kind": "torch-build", "torch_attr": "cuda", "runtime_name": "CUDA",
            "driver_name": "NVIDIA driver",
            "decisions": [
                "driver: the minor-version-compatibility floor of the CUDA major (NVIDIA's CUDA Compatibility guide) "
                "won over the per-toolkit driver of the release notes for the verdict: below the floor the CUDA "
                "runtime refuses to start, so that is a mismatch; between the floor and the toolkit's own driver "
                "the wheel runs with a limited feature set (PTX JIT of newer code fails), so that is a caution",
                "variants: a torch release's CUDA builds are the matrix's stable and experimental CUDA of its minor "
                "release, plus the CUDA its PyPI wheel pins where the matrix lacks it (pip installs the pin)"],
            "sources": [pypi_source, PYTORCH_MATRIX, NVIDIA_MINOR_COMPAT, NVIDIA_TOOLKIT_DRIVERS],
            "drivers": drivers, "releases": releases}


def rocm_facts() -> dict[str, Any]:
    releases = []
    for minor, (python, _stable, _experimental, rocm) in sorted(TORCH_MINORS.items(), key=lambda i: _py_key(i[0])):
        short = _minor(rocm)
        validated = [r for r, torches in sorted(ROCM_VALIDATED.items(), key=lambda i: _py_key(i[0]))
                     if minor in torches]
        decisions = ["runtime: PyTorch's matrix won for the pip wheel (the rocmX.Y wheel bundles the ROCm user-space "
                     "libraries it was built with); AMD's matrix applies to AMD's own builds and is kept as "
                     "validated_by_amd"]
        if short in ROCM_VALIDATED and minor not in ROCM_VALIDATED[short]:
            decisions.append(f"amd: AMD's matrix does not list PyTorch {minor} for ROCm {short}")
        elif short not in ROCM_VALIDATED:
            decisions.append(f"amd: AMD's matrix read here stops at ROCm 6.3.x; ROCm {short} is not in it")
        releases.append({"torch": minor, "python_range": python, "runtime": rocm, "runtime_name": "ROCm",
                         "variants": [rocm], "index": {rocm: WHL.format(variant=f"rocm{rocm}")},
                         "validated_by_amd": validated, "decisions": decisions})
    return {"chip": "rocm", "plugin": "", "kind": "torch-build", "torch_attr": "hip", "runtime_name": "ROCm",
            "driver_name": "amdgpu kernel driver",
            "decisions": ["driver: AMD's user and kernel-space matrix pairs a kernel driver (KMD) with the user space "
                          "of +/- 2 ROCm releases, by the ROCm release the KMD shipped with; rocm-smi reports the "
                          "kernel module's own version (6.8.5, 30.30.2), which no source read here maps to a ROCm "
                          "release, so the driver is reported, not judged"],
            "sources": [PYTORCH_MATRIX, AMD_MATRIX, AMD_KERNEL_MATRIX], "releases": releases}


def xpu_facts() -> dict[str, Any]:
    releases = [{"torch": minor, "runtime": oneapi, "runtime_name": "oneAPI (intel-sycl-rt)", "variants": [oneapi],
                 "index": {oneapi: WHL.format(variant="xpu")}, "decisions": [f"runtime: from {source}"],
                 "sources": {source: {"oneapi": oneapi}}}
                for minor, (oneapi, source) in sorted(XPU_ONEAPI.items(), key=lambda i: _py_key(i[0]))]
    return {"chip": "xpu", "plugin": "", "kind": "torch-build", "torch_attr": "xpu", "runtime_name": "oneAPI",
            "driver_name": "Intel GPU driver",
            "decisions": ["runtime: torch.version.xpu names the oneAPI compiler torch was built with (20250301 = "
                          "2025.3.1); the intel-sycl-rt wheel pip installed beside it must be of the same year.minor "
                          "(its libsycl.so major changes between them); the installed one wins over the table, which "
                          "only says what each release shipped with",
                          "driver: PyTorch's XPU docs name no driver version per release, so the driver is not judged",
                          "releases: 2.5 and 2.13+ have no row (no source read here names their oneAPI)"],
            "sources": XPU_SOURCES, "releases": releases}


# Installed toolkits ---------------------------------------------------------------------------------
# How to find the vendor toolkit installed beside a plugin (CANN, CNToolkit, MUSA SDK): the environment
# variables the vendor's setup scripts export, then the default install roots; files relative to a root (glob
# patterns); `format` says how the version is read and where that format was seen.
INSTALLED = {
    "npu": {"name": "CANN", "env": ["ASCEND_TOOLKIT_HOME", "ASCEND_HOME_PATH"],
            "roots": ["/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann"],
            "files": ["*-linux/ascend_toolkit_install.info", "version.info", "version.cfg"],
            "format": "key=value lines, version=8.0.RC1 (package_name=Ascend-cann-toolkit, innerversion, arch, "
                      "path); seen in CANN install guides and a vllm-ascend issue's pasted file, found with the search "
                      "tool; version.info has Version=; version.cfg read the same way"},
    "mlu": {"name": "CNToolkit", "env": ["NEUWARE_HOME"], "roots": ["/usr/local/neuware"],
            "files": ["version.txt"],
            "format": "one line 'Neuware Version 3.9.0': the first X.Y.Z; seen in Cambricon benchmark READMEs and "
                      "device plugins reading it, found with the search tool"},
    "musa": {"name": "MUSA SDK", "env": ["MUSA_HOME", "MUSA_PATH"], "roots": ["/usr/local/musa"],
             "files": ["version.txt", "version.json"],
             "format": "not confirmed from a vendor source: the first X.Y.Z of the file, or its 'version' key when "
                       "JSON (the form torch_musa's sw_stack_detection.py parses from musa_toolkits_version)"},
}


# Main ---------------------------------------------------------------------------------------------
REPOS = {"npu": "Ascend/pytorch", "mlu": "Cambricon/torch_mlu", "musa": "MooreThreads/torch_musa"}
CHIPS = [*REPOS, "cuda", "rocm", "xpu"]


def generate(chip: str, gitdir: str, cache: Cache) -> dict[str, Any]:
    builders = {"npu": lambda: npu_facts(cache, gitdir), "mlu": lambda: mlu_facts(gitdir),
                "musa": lambda: musa_facts(gitdir), "cuda": lambda: cuda_facts(cache), "rocm": rocm_facts,
                "xpu": xpu_facts}
    facts = builders[chip]()
    if chip in INSTALLED:
        facts["installed"] = INSTALLED[chip]
    return {"generated_by": f"scripts/gen_compat.py --chip {chip}", **facts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--chip", choices=CHIPS, action="append", required=True)
    parser.add_argument("--repo", action="append", default=[], metavar="OWNER/NAME=GITDIR")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/torch_fl/compat-sources")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    parser.add_argument("--verify", action="store_true", help="compare with the checked-in files instead")
    args = parser.parse_args(argv)
    repos = dict(r.split("=", 1) for r in args.repo)
    status = 0
    for chip in args.chip:
        if chip in REPOS and REPOS[chip] not in repos:
            parser.error(f"--chip {chip} needs --repo {REPOS[chip]}=GITDIR")
        gitdir = repos.get(REPOS.get(chip, ""), "")
        text = json.dumps(generate(chip, gitdir, Cache(args.cache)), indent=1, ensure_ascii=False) + "\n"
        path = args.out_dir / f"{chip}.json"
        if args.verify:
            same = path.exists() and path.read_text(encoding="utf-8") == text
            print(f"{path}: {'matches its sources' if same else 'DIFFERS from its sources'}")
            status |= not same
        else:
            args.out_dir.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
    return status


if __name__ == "__main__":
    sys.exit(main())
