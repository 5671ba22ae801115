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


# npu ----------------------------------------------------------------------------------------------
def npu_pypi(cache: Cache) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """release -> facts read from PyPI; and the source record."""
    url = PYPI.format(name="torch-npu")
    index = json.loads(cache.get("pypi-torch-npu.json", lambda: _get(url)))
    releases: dict[str, dict[str, Any]] = {}
    for version, files in index["releases"].items():
        key = version_key(version)
        if not key or key < NPU_FIRST or not files:
            continue
        wheels = [f for f in files if f["filename"].endswith(".whl")]
        pick = min(wheels, key=lambda f: ("cp311" not in f["filename"], "x86_64" not in f["filename"],
                                          f["filename"]))
        file_url = urllib.parse.urljoin(url, pick["url"])
        text = cache.get(f"METADATA-{pick['filename']}", lambda u=file_url, s=pick["size"]: wheel_metadata(u, s))
        meta = Parser().parsestr(text)
        requires = meta.get_all("Requires-Dist") or []
        releases[version] = {
            "readme_cann": readme_cann(meta.get_payload() or ""),
            "metadata_of": f"{pick['filename']} sha256:{pick['digests']['sha256']}",
            "metadata_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "requires_torch": next((r.split(";")[0].strip()[len("torch"):].strip(" ()") for r in requires
                                    if re.match(r"torch\b(?![-_])", r)), ""),
            "requires_python": meta.get("Requires-Python") or "",
            "classifier_pythons": sorted({c.rsplit("::", 1)[1].strip() for c in meta.get_all("Classifier") or []
                                          if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)},
                                         key=_py_key),
            "wheel_pythons": sorted({_py(m.group("py")) for f in wheels if (m := _WHEEL.match(f["filename"]))},
                                    key=_py_key),
            "platforms": sorted({_platform(m.group("plat")) for f in wheels
                                 if (m := _WHEEL.match(f["filename"]))}),
            "uploaded": min(f["upload_time"] for f in files)[:10],
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


# Main ---------------------------------------------------------------------------------------------
REPOS = {"npu": "Ascend/pytorch", "mlu": "Cambricon/torch_mlu", "musa": "MooreThreads/torch_musa"}


def generate(chip: str, gitdir: str, cache: Cache) -> dict[str, Any]:
    facts = npu_facts(cache, gitdir) if chip == "npu" else mlu_facts(gitdir) if chip == "mlu" else musa_facts(gitdir)
    return {"generated_by": f"scripts/gen_compat.py --chip {chip}", **facts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--chip", choices=sorted(REPOS), action="append", required=True)
    parser.add_argument("--repo", action="append", default=[], metavar="OWNER/NAME=GITDIR")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache/torch_fl/compat-sources")
    parser.add_argument("--out-dir", type=Path, default=OUT_DIR)
    parser.add_argument("--verify", action="store_true", help="compare with the checked-in files instead")
    args = parser.parse_args(argv)
    repos = dict(r.split("=", 1) for r in args.repo)
    status = 0
    for chip in args.chip:
        if REPOS[chip] not in repos:
            parser.error(f"--chip {chip} needs --repo {REPOS[chip]}=GITDIR")
        text = json.dumps(generate(chip, repos[REPOS[chip]], Cache(args.cache)), indent=1, ensure_ascii=False) + "\n"
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
