"""torch's own accelerator build against this machine: the CUDA / ROCm / oneAPI a torch wheel was built for
(torch.version.cuda / hip / xpu) against the driver and runtime installed here, with the pip command that
installs a build that fits.

The facts are generated (description/compat/{cuda,rocm,xpu}.json, scripts/gen_compat.py): which CUDA builds
each torch release has, the driver floor of each CUDA major and the driver each toolkit shipped with, the ROCm
of each release's wheels, the oneAPI each xpu build links. The probe results (the driver, the ROCm under
/opt/rocm, the intel-sycl-rt wheel) are arguments, so every verdict is testable on a CPU machine.

Example::

    >>> from torch_fl.analysis.installed import Driver
    >>> check("2.7.0+cu128", cuda="12.8", driver=Driver("nvidia", "520.61.05", "11.8")).fixes[0]
    "pip install --force-reinstall 'torch==2.7.0' --index-url https://download.pytorch.org/whl/cu118"
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

from .._versions import release, satisfies
from .compat import CompatResult, build_facts
from .installed import Driver

_MAX_FIXES = 2


def check_here() -> CompatResult | None:
    """This process's torch build against this machine's driver and runtime (None for a CPU-only build)."""
    import torch

    from . import installed

    cuda, hip, xpu = (getattr(torch.version, name, None) or "" for name in ("cuda", "hip", "xpu"))
    if not (cuda or hip or xpu):
        return None
    return check(torch.__version__, cuda=cuda if not hip else "", hip=hip, xpu=xpu,
                 driver=installed.driver("hip" if hip else "cuda") if (cuda or hip) else None,
                 rocm_installed=installed.rocm_version() if hip else "", sycl_rt=_dist("intel-sycl-rt") if xpu else "")


def check(torch_version: str, *, cuda: str = "", hip: str = "", xpu: str = "", driver: Driver | None = None,
          rocm_installed: str = "", sycl_rt: str = "") -> CompatResult | None:
    """The verdict for a torch build: `cuda` / `hip` / `xpu` as torch.version reports them; `driver`,
    `rocm_installed` (/opt/rocm) and `sycl_rt` (the intel-sycl-rt wheel) as the probes found them."""
    if hip:
        return _rocm(torch_version, hip, driver, rocm_installed)
    if cuda:
        return _cuda(torch_version, cuda, driver)
    if xpu:
        return _xpu(torch_version, xpu, sycl_rt)
    return None


def _result(chip: str, torch_version: str, runtime: str) -> tuple[CompatResult, dict[str, Any]]:
    data = build_facts(chip) or {"path": "", "releases": [], "decisions": [], "runtime_name": chip}
    result = CompatResult("torch", torch_version, torch_version, "", runtime=runtime, facts_path=data["path"],
                          why=f"a torch wheel carries the {data['runtime_name']} runtime it was built with, and "
                              f"that runtime needs a driver and libraries of its own generation")
    result.decisions = list(data["decisions"])
    return result, data


def _rows(data: dict[str, Any], torch_version: str) -> list[dict[str, Any]]:
    """The fact rows of a torch release: by exact release (cuda) or by minor release (rocm, xpu)."""
    base = ".".join(str(n) for n in release(torch_version)[:3])
    minor = ".".join(base.split(".")[:2])
    return [r for r in data["releases"] if r["torch"] in (base, minor)]


# CUDA ---------------------------------------------------------------------------------------------
def _cuda(torch_version: str, cuda: str, driver: Driver | None) -> CompatResult:
    result, data = _result("cuda", torch_version, cuda)
    cuda = _mm(cuda)
    need = data.get("drivers", {}).get(cuda, {"floor": "", "toolkit": ""})
    rows = _rows(data, torch_version)
    result.known = bool(rows) and bool(need["floor"])
    result.expected = {"torch": "", "python": rows[0]["python"] if rows else [], "runtime_name": "NVIDIA driver",
                       "runtime": f">={need['floor']}" + (f" (every feature: >={need['toolkit']})" if need["toolkit"]
                                                          else "") if need["floor"] else "",
                       "platforms": [], "cuda_builds": rows[0]["variants"] if rows else []}
    if driver is None:
        result.cautions.append(f"torch {torch_version} is built for CUDA {cuda}; no NVIDIA driver was found "
                               f"(nvidia-smi, /proc/driver/nvidia/version), so the driver it needs "
                               f"({result.expected['runtime'] or 'unknown'}) is unchecked")
        return result
    result.runtime = f"NVIDIA driver {driver.version}" + (f" (CUDA {driver.cuda})" if driver.cuda else "")
    if not need["floor"]:
        result.cautions.append(f"torch-fl's CUDA facts ({data['path']}) have no driver floor for CUDA {cuda}: "
                               f"driver {driver.version} is unchecked")
        return result
    if not _fits(cuda, driver, data):
        result.mismatches.append(
            f"torch {torch_version} is built for CUDA {cuda}, which needs an NVIDIA driver >={need['floor']} "
            f"(CUDA {cuda.split('.')[0]}.x minor version compatibility), and this machine has driver "
            f"{driver.version}" + (f" (its newest CUDA: {driver.cuda})" if driver.cuda else "")
            + f"; upgrading the driver to >={need['toolkit'] or need['floor']} fixes it too")
        result.fixes = _cuda_fixes(data, torch_version, driver)
    elif need["toolkit"] and not satisfies(driver.version, f">={need['toolkit']}"):
        result.cautions.append(f"driver {driver.version} is older than the {need['toolkit']} CUDA {cuda} shipped "
                               f"with: it runs through minor version compatibility, with limits (PTX JIT of code "
                               f"newer than the driver fails); upgrade the driver to >={need['toolkit']} for all of it")
    return result


def _fits(cuda: str, driver: Driver, data: dict[str, Any]) -> bool:
    """Whether a CUDA major.minor runs on `driver`: its major's floor, and the driver's own newest CUDA major."""
    floor = data.get("drivers", {}).get(cuda, {}).get("floor", "")
    if not floor or not satisfies(driver.version, f">={floor}"):
        return False
    return not driver.cuda or release(driver.cuda)[:1] >= release(cuda)[:1]


def _cuda_fixes(data: dict[str, Any], torch_version: str, driver: Driver) -> list[str]:
    """A build of this torch release for a CUDA the driver runs, else the newest release that has one."""
    out = []
    for row in [*_rows(data, torch_version), *sorted(data["releases"], key=lambda r: release(r["torch"]),
                                                     reverse=True)]:
        fitting = [v for v in row["variants"] if _fits(v, driver, data)]
        if fitting:
            out.append(_install(row, max(fitting, key=release)))
        if len(out) >= _MAX_FIXES:
            break
    return list(dict.fromkeys(out))


def _install(row: dict[str, Any], variant: str) -> str:
    index = row.get("index", {}).get(variant)
    where = f" --index-url {index}" if index else ""  # no index: the PyPI wheel is that build
    spec = row["torch"] if row["torch"].count(".") >= 2 else f"{row['torch']}.*"  # rocm/xpu rows: a minor release
    return f"pip install --force-reinstall 'torch=={spec}'{where}"


# ROCm ---------------------------------------------------------------------------------------------
def _rocm(torch_version: str, hip: str, driver: Driver | None, rocm_installed: str) -> CompatResult:
    built = _mm(hip)
    result, data = _result("rocm", torch_version, f"ROCm {built}")
    rows = _rows(data, torch_version)
    result.known = bool(rows)
    result.expected = {"torch": "", "python": [], "runtime_name": "ROCm",
                       "runtime": " or ".join(r["runtime"] for r in rows), "platforms": [],
                       "amdgpu": driver.version if driver else ""}
    if rocm_installed and _mm(rocm_installed) != built:
        fitting = [r for r in data["releases"] if _mm(r["runtime"]) == _mm(rocm_installed)]
        best = max(fitting, key=lambda r: release(r["torch"])) if fitting else None
        hint = (f"; or `{_install(best, best['runtime'])}` for the newest torch built for ROCm "
                f"{_mm(rocm_installed)}") if best else ""
        result.cautions.append(f"torch {torch_version} carries ROCm {built} libraries and /opt/rocm is ROCm "
                               f"{rocm_installed}: extensions compiled against /opt/rocm link another HIP than "
                               f"torch's{hint}")
    for row in rows:
        amd = row.get("validated_by_amd", [])
        if amd and _mm(row["runtime"]) not in amd:
            result.cautions.append(f"AMD's matrix lists PyTorch {row['torch']} for ROCm {', '.join(amd)}, not for the "
                                   f"ROCm {row['runtime']} its wheels use (PyTorch's build, not validated by AMD)")
    return result


# XPU ----------------------------------------------------------------------------------------------
def oneapi_version(xpu: str) -> str:
    """torch.version.xpu ('20250301', the SYCL compiler's YYYYMMPP) as a oneAPI version ('2025.3.1')."""
    if len(xpu) == 8 and xpu.isdigit():
        return f"{xpu[:4]}.{int(xpu[4:6])}.{int(xpu[6:8])}"
    return xpu


def _xpu(torch_version: str, xpu: str, sycl_rt: str) -> CompatResult:
    built = oneapi_version(xpu)
    result, data = _result("xpu", torch_version, f"oneAPI {built}")
    rows = _rows(data, torch_version)
    result.known = True  # torch.version.xpu itself says what the runtime must be
    result.expected = {"torch": "", "python": [], "runtime_name": "intel-sycl-rt", "runtime": f"=={built}",
                       "platforms": [], "released_with": " or ".join(r["runtime"] for r in rows)}
    if not sycl_rt:
        result.cautions.append(f"torch {torch_version} links oneAPI {built} and no intel-sycl-rt wheel is installed: "
                               f"the SYCL runtime comes from the system (a oneAPI install), whose version is "
                               f"unchecked")
        return result
    result.runtime = f"intel-sycl-rt {sycl_rt}"
    if _mm(sycl_rt) != _mm(built):
        # the xpu wheel pins intel-sycl-rt to its compiler's release; another release breaks that pin (`pip check`
        # says so) and can change libsycl's ABI under torch's XPU libraries
        result.mismatches.append(f"torch {torch_version} is built with oneAPI {built}, and intel-sycl-rt {sycl_rt} "
                                 f"is installed (another oneAPI release than the one torch's XPU libraries were "
                                 f"built against: they may fail to load or misbehave)")
        result.fixes = [f"pip install 'intel-sycl-rt=={built}'",
                        f"pip install --force-reinstall 'torch=={'.'.join(map(str, release(torch_version)[:3]))}'"
                        f" --index-url https://download.pytorch.org/whl/xpu"]
    elif release(sycl_rt)[:3] != release(built)[:3]:
        result.cautions.append(f"intel-sycl-rt {sycl_rt} is another patch release than the oneAPI {built} torch "
                               f"{torch_version} was built with; `pip install 'intel-sycl-rt=={built}'` restores it")
    return result


# Helpers ------------------------------------------------------------------------------------------
def _mm(version: str) -> str:
    """'12.8.93' -> '12.8'; '6.3.42131-fa1d09cbd' -> '6.3'."""
    return ".".join(str(n) for n in release(version.split("-", 1)[0])[:2])


def _dist(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return ""
