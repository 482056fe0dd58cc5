"""What ``model/`` as a file of its own costs at the end of a run: bytes and seconds at 135M.

    make kit
    python bench/lm/lm_model_clone.py \
        --model ~/.cache/eligibility-kit/models/smollm2-135m-instruct \
        --repeats 5 --json bench/results/lm_model_clone.json

Issue 90: the run's ``model/`` held the checkpoint's weights file by a hard link, so a write in
place to ``RUN/model/model.safetensors`` damaged the checkpoint. It is now a clone
(``eligibility._io.clone_file``: copy-on-write where the file system has it, else a copy). This
times, on the file system of ``--dir`` (default: a temporary directory beside the model), what
the run's end does for ``model/`` (``lm.edge.hf.save_cloned`` of a checkpoint slot, the
tokenizer left out) against the hard link it replaces, alternating, after one unmeasured round
(the source in the page cache, as a run's end finds the file it has just written). Reported:
each way's seconds (median, min, max), the bytes it adds on disk (the blocks ``du`` counts of
the new weights file: none for a hard link or a clone), and whether a clone was made.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from eligibility._io import clone_file
from eligibility.lm.edge.hf import save_cloned


def _linked(slot: Path, out: Path) -> None:
    """What the run's end did before: each file of the slot hard-linked into ``out``."""
    out.mkdir()
    for file in slot.iterdir():
        os.link(file, out / file.name)


def _added_bytes(path: Path) -> int:
    """Bytes of blocks the file holds that no other name shares (0 for a hard link)."""
    return 0 if path.stat().st_nlink > 1 else path.stat().st_blocks * 512


def main() -> None:
    """Time the clone and the link; print (and write) the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="a save_pretrained directory")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where the slot is (its fs)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(dir=args.dir or args.model.parent, prefix=".clone-bench."))
    try:
        slot = work / "checkpoint.model-0"
        slot.mkdir()
        for name in ("config.json", "generation_config.json", "model.safetensors"):
            if (args.model / name).is_file():
                shutil.copyfile(args.model / name, slot / name)
        weights = slot / "model.safetensors"
        times: dict[str, list[float]] = {"clone": [], "link": []}
        made, added = "", {"clone": 0, "link": 0}
        for i in range(args.repeats + 1):
            for way in ("clone", "link") if i % 2 == 0 else ("link", "clone"):
                out = work / f"model-{way}"
                shutil.rmtree(out, ignore_errors=True)
                os.sync()
                start = time.perf_counter()
                if way == "clone":
                    save_cloned(slot, None, out)
                else:
                    _linked(slot, out)
                os.sync()  # the copy's bytes on disk, as the run's end leaves them
                took = time.perf_counter() - start
                if i > 0:
                    times[way].append(took)
                added[way] = _added_bytes(out / "model.safetensors")
        probe = work / "probe"
        made = clone_file(weights, probe)
        result = {
            "argv": sys.argv,
            "model": str(args.model),
            "weights_bytes": weights.stat().st_size,
            "file_system": subprocess.run(
                ["stat", "-f", "-c", "%T", str(work)], capture_output=True, text=True
            ).stdout.strip(),
            "made": made,
            "machine": platform.processor() or platform.machine(),
            "seconds": {
                w: {
                    "median": statistics.median(t),
                    "min": min(t),
                    "max": max(t),
                    "runs": t,
                }
                for w, t in times.items()
            },
            "added_bytes": added,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
