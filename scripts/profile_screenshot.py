"""Regenerate docs/img/profile-timeline.png: one profiled step of a model on an emulated chip, drawn by
`torchfl profile --timeline` and photographed by headless Chromium.

The model's routes are forced (both example models are native on the npu) so that the step has translated
and fallback calls: their fl:: ranges on the host thread, and on the chip's stream the device kernels and each
fallback's two copies (Memcpy DtoH / HtoD). Perfetto's UI needs the internet and TensorBoard's trace view loads a
polyfill from a CDN, so the page is torch-fl's own static timeline (analysis/profile.py's timeline_html).

    OMP_NUM_THREADS=1 python scripts/profile_screenshot.py [--model examples/gpt.py:factory] [--device emu:npu]
        [--route aten::gelu=translate,aten::mm.default=fallback] [--out docs/img/profile-timeline.png]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="examples/gpt.py:factory")
    parser.add_argument("--device", default="emu:npu")
    parser.add_argument("--route", default="aten::gelu=translate,aten::mm.default=fallback", help="FL_ROUTE")
    parser.add_argument("--out", default=str(ROOT / "docs" / "img" / "profile-timeline.png"))
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args()
    if not Path(args.chromium).exists():
        print(f"profile_screenshot: no Chromium at {args.chromium}; install it or pass --chromium PATH",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        page = Path(folder) / "timeline.html"
        env = {**os.environ, "FL_ROUTE": args.route, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
        torchfl = [sys.executable, "-c", "import sys, _torch_fl_cli; sys.exit(_torch_fl_cli.main())"]
        subprocess.run([*torchfl, "profile", args.model, "--device", args.device, "--steps", "2", "--warmup", "1",
                        "--timeline", str(page)], cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        height = int(re.search(r"<svg [^>]*height='(\d+)'", page.read_text()).group(1))
        out = Path(args.out).resolve()
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([args.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--screenshot={out}", f"--window-size=1280,{height}", page.as_uri()],
                       check=True, capture_output=True, timeout=300)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
