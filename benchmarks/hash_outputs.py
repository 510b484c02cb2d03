"""Hash what `prepare` produces, so a refactor can show its outputs did not change (issue 33, "Outputs do not change").

Two modes, both reaching foxhunt only through stable entry points, so the script survives modules moving:
- memory (default): `foxhunt.RunConfig.from_options(parquet_file=..., **opts).data` (`TrainConfig` before 0d7d648) gives the DataConfig, and
  `prepare_data` (found under a few candidate module paths, else by walking `foxhunt.data`) gives PreparedData.
  Hashed: every tensor of its windows, the splits, the own moves, the fitted transform, schema, summary and rolls.
- --store: runs `python -m foxhunt prepare -f INPUT ... --out DIR` as a subprocess (same PYTHONPATH) and hashes
  every .npy of the store and its manifest.json.
Arrays are hashed as sha256 of dtype, shape and C-ordered bytes; dicts as sha256 of canonical JSON (sorted keys,
exact float repr), and small dicts are also kept in the JSON so a comparison names the differing leaves.
Fields that change from run to run are left out (NONDETERMINISTIC).

Commands (run from the repository root; `--opt key=value` is a `foxhunt train` option, e.g. encoder_length=64):
  PYTHONPATH=/path/src python benchmarks/hash_outputs.py FILE... --out A.json [--opt k=v ...] [--keep DIR]
  PYTHONPATH=/path/src python benchmarks/hash_outputs.py FILE... --store --workers 2 --out A.json [--keep DIR]
  python benchmarks/hash_outputs.py --compare A.json B.json [--recompute]
--keep DIR keeps the arrays (memory: DIR/*.npy; store: the store itself) so --compare can print the largest absolute
difference of a differing array; --recompute reruns a side whose arrays are gone (with the PYTHONPATH it recorded).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import pkgutil
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

# Manifest / summary keys that differ between two runs of the same code (wall times, dates, where it was written).
# mtime_ns: a store's manifest records its inputs' modification times, which differ between two checkouts.
NONDETERMINISTIC = frozenset({"created_utc", "mtime_ns"})
CANDIDATES = ("foxhunt.data.prepare", "foxhunt.data.dataset.prepare", "foxhunt.data.dataset", "foxhunt.data")
CHUNK = 1 << 24  # bytes hashed at a time, so a store's 2 GB array is never read whole


def parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # a plain string (a date, a mode name)


def clean(obj: Any) -> Any:
    """A JSON-able copy of `obj` without the NONDETERMINISTIC keys; numpy scalars/arrays as plain values."""
    if isinstance(obj, dict):
        return {str(k): clean(v) for k, v in obj.items() if k not in NONDETERMINISTIC}
    if isinstance(obj, list | tuple):
        return [clean(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return clean(obj.tolist())
    if isinstance(obj, np.generic):
        return obj.item()
    if hasattr(obj, "to_dict"):
        return clean(obj.to_dict())
    return obj


def hash_json(obj: Any) -> dict:
    text = json.dumps(clean(obj), sort_keys=True, allow_nan=True, default=repr)
    entry = {"sha256": hashlib.sha256(text.encode()).hexdigest()}
    if len(text) < 200_000:
        entry["value"] = json.loads(text)
    return entry


def hash_array(a: Any) -> dict:
    if hasattr(a, "numpy"):  # a torch tensor
        a = a.detach().cpu().numpy()
    a = np.asarray(a)
    h = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode())
    flat = a.reshape(-1) if a.flags.c_contiguous else np.ascontiguousarray(a).reshape(-1)
    step = max(1, CHUNK // max(1, a.itemsize))
    for i in range(0, flat.size, step):
        h.update(np.ascontiguousarray(flat[i : i + step]).tobytes())
    return {"sha256": h.hexdigest(), "shape": list(a.shape), "dtype": str(a.dtype)}


def find_prepare_data() -> Any:
    for name in CANDIDATES:
        try:
            fn = getattr(importlib.import_module(name), "prepare_data", None)
        except ImportError:
            continue
        if callable(fn):
            return fn
    data = importlib.import_module("foxhunt.data")
    for info in pkgutil.walk_packages(data.__path__, "foxhunt.data."):
        fn = getattr(importlib.import_module(info.name), "prepare_data", None)
        if callable(fn):
            return fn
    raise SystemExit("hash_outputs: no prepare_data found under foxhunt.data; add its module to CANDIDATES")


def hash_memory(files: list[str], opts: dict, keep: Path | None) -> dict:
    import foxhunt

    run_config = getattr(foxhunt, "RunConfig", None) or foxhunt.TrainConfig  # its name before 0d7d648
    cfg = run_config.from_options(parquet_file=files, **opts).data
    data = find_prepare_data()(cfg)
    out: dict[str, dict] = {}
    arrays: dict[str, Any] = {}
    plain = {}
    for name, v in vars(data.windows).items():
        if name.startswith("_") or v is None:
            continue
        if hasattr(v, "shape"):
            arrays[f"windows.{name}"] = v
        else:
            plain[name] = v
    out["windows.fields"] = hash_json(plain)
    arrays.update({f"splits.{k}": v for k, v in data.splits.items()})
    arrays.update({f"own_moves.{k}": v for k, v in data.own_moves.items()})
    for key, a in arrays.items():
        out[key] = hash_array(a)
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            np.save(keep / f"{key}.npy", a.numpy() if hasattr(a, "numpy") else np.asarray(a))
    out["transform"] = hash_json(data.transform.to_dict())
    out["schema"] = hash_json(data.schema)
    out["summary"] = hash_json(data.summary)
    out["rolls"] = hash_json(data.rolls)
    return out


def cli_flags(opts: dict) -> list[str]:
    flags = []
    for k, v in opts.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            flags.append(flag if v else "--no-" + k.replace("_", "-"))
        else:
            flags += [flag, str(v)]
    return flags


def hash_store(files: list[str], opts: dict, workers: int, keep: Path | None) -> dict:
    store = keep or Path(tempfile.mkdtemp(prefix="hash_store.")) / "store"
    cmd = [sys.executable, "-m", "foxhunt", "prepare", *(x for f in files for x in ("-f", f)), *cli_flags(opts),
           "--workers", str(workers), "--out", str(store)]
    try:
        subprocess.run(cmd, check=True, env=os.environ.copy())
        out = {p.name: hash_array(np.load(p, mmap_mode="r")) for p in sorted(store.glob("*.npy"))}
        out["manifest.json"] = hash_json(json.loads((store / "manifest.json").read_text()))
        for p in sorted(store.iterdir()):
            if p.is_file() and p.suffix != ".npy" and p.name != "manifest.json":
                out[p.name] = {"sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
        return out
    finally:
        if keep is None:
            shutil.rmtree(store.parent, ignore_errors=True)


def run_hash(a: argparse.Namespace) -> None:
    import foxhunt

    opts = dict(kv.split("=", 1) for kv in a.opt)
    opts = {k: parse_value(v) for k, v in opts.items()}
    keep = Path(a.keep).resolve() if a.keep else None
    t0 = time.perf_counter()
    hashes = hash_store(a.files, opts, a.workers, keep) if a.store else hash_memory(a.files, opts, keep)
    meta = {"files": [str(Path(f).resolve()) for f in a.files], "opts": opts, "mode": "store" if a.store else "memory",
            "workers": a.workers, "foxhunt": str(Path(foxhunt.__file__).resolve().parent.parent),
            "arrays": str(keep) if keep else None, "seconds": round(time.perf_counter() - t0, 1)}
    Path(a.out).write_text(json.dumps({"meta": meta, "hashes": hashes}, indent=1, sort_keys=True))
    print(f"{a.out}: {len(hashes)} keys in {meta['seconds']} s", file=sys.stderr)


def leaf_diffs(x: Any, y: Any, path: str = "") -> list[str]:
    """The paths where two JSON values differ, with the absolute difference of numbers."""
    if isinstance(x, dict) and isinstance(y, dict):
        return [d for k in sorted(set(x) | set(y)) for d in leaf_diffs(x.get(k), y.get(k), f"{path}.{k}")]
    if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        return [d for i, (u, v) in enumerate(zip(x, y, strict=True)) for d in leaf_diffs(u, v, f"{path}[{i}]")]
    if x == y or (isinstance(x, float) and isinstance(y, float) and np.isnan(x) and np.isnan(y)):
        return []
    if isinstance(x, int | float) and isinstance(y, int | float) and not isinstance(x, bool):
        return [f"{path}: {x!r} vs {y!r} (abs diff {abs(x - y):.3g})"]
    return [f"{path}: {str(x)[:60]} vs {str(y)[:60]}"]


def arrays_of(doc: dict, recompute: bool, tmp: Path) -> Path | None:
    """Where the arrays of a hash run lie: its --keep folder, or a rerun's when asked to recompute."""
    meta = doc["meta"]
    if meta.get("arrays") and Path(meta["arrays"]).exists():
        return Path(meta["arrays"])
    if not recompute:
        return None
    keep = tmp / f"rerun{len(list(tmp.iterdir()))}"
    cmd = [sys.executable, __file__, *meta["files"], "--out", str(keep) + ".json", "--keep", str(keep),
           "--workers", str(meta["workers"]), *(f"--opt={k}={json.dumps(v)}" for k, v in meta["opts"].items())]
    cmd += ["--store"] if meta["mode"] == "store" else []
    subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": meta["foxhunt"]})
    return keep


def array_file(folder: Path, key: str, mode: str) -> Path:
    return folder / (key if mode == "store" else f"{key}.npy")


def compare(path_a: str, path_b: str, recompute: bool) -> int:
    a, b = (json.loads(Path(p).read_text()) for p in (path_a, path_b))
    ha, hb = a["hashes"], b["hashes"]
    differ = []
    for key in sorted(set(ha) | set(hb)):
        same = key in ha and key in hb and ha[key]["sha256"] == hb[key]["sha256"]
        print(f"{'equal    ' if same else 'DIFFERENT'} {key}")
        if not same:
            differ.append(key)
        if not same and key in ha and key in hb and "value" in ha[key] and "value" in hb[key]:
            for line in leaf_diffs(ha[key]["value"], hb[key]["value"])[:20]:
                print(f"    {line}")
    arrays = [k for k in differ if k in ha and k in hb and "dtype" in ha[k]]
    if arrays:
        with tempfile.TemporaryDirectory() as tmp:
            da, db = arrays_of(a, recompute, Path(tmp)), arrays_of(b, recompute, Path(tmp))
            for key in arrays:
                if da is None or db is None:
                    print(f"    {key}: arrays not kept (hash with --keep, or compare with --recompute)")
                    continue
                x = np.load(array_file(da, key, a["meta"]["mode"]), mmap_mode="r")
                y = np.load(array_file(db, key, b["meta"]["mode"]), mmap_mode="r")
                if x.shape != y.shape:
                    print(f"    {key}: shape {x.shape} vs {y.shape}")
                    continue
                diff = np.abs(x.astype(np.float64) - y.astype(np.float64))
                nan = np.isnan(x.astype(np.float64)) != np.isnan(y.astype(np.float64))
                print(f"    {key}: largest abs diff {np.nanmax(diff, initial=0.0):.3g}, NaN placement differs at "
                      f"{int(nan.sum())} entries")
    print(f"{len(differ)} of {len(set(ha) | set(hb))} keys differ")
    return 1 if differ else 0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("files", nargs="*", help="bars files (parquet, CSV, DBN, a directory or a glob)")
    p.add_argument("--out", help="the JSON of hashes to write")
    p.add_argument("--opt", action="append", default=[], help="key=value: a `foxhunt train` option (repeatable)")
    p.add_argument("--store", action="store_true", help="hash the store `foxhunt prepare` writes")
    p.add_argument("--workers", type=int, default=2, help="--store: `foxhunt prepare --workers`")
    p.add_argument("--keep", help="keep the arrays here, for --compare's largest difference")
    p.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two JSONs of hashes")
    p.add_argument("--recompute", action="store_true", help="--compare: rerun a side whose arrays were not kept")
    a = p.parse_args()
    if a.compare:
        raise SystemExit(compare(*a.compare, a.recompute))
    if not a.files or not a.out:
        p.error("give bars files and --out (or --compare A B)")
    run_hash(a)


if __name__ == "__main__":
    main()
