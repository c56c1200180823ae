"""Carry the gpu-transformers profile's wheels to a GPU host that has no package registry.

`build` (on a connected machine) downloads the wheels of env/requirements-gpu-transformers.in for
the host's Python, drops those the host already provides (its CUDA torch stack), and splits them
into folders part1/, part2/, ... of at most --part-mb MB each (big wheels cut into chunks), with
part1/MANIFEST.json listing every wheel's size, sha256 and chunks.

`install` (on the host) joins and checks the wheels, installs them all into TARGET in ONE
`pip install --target` call (a second `--target --upgrade` call replaces the `opentelemetry`
namespace folder and breaks FastAPI's import), and makes VENV, the environment of the Triton
Python-backend stub and of the notebook kernel: a venv without pip whose tutorial.pth lists, in
order, TARGET, a curated copy of the host's site-packages, and the repository (`import scripts`).

Why curated: the Triton 2.51 stub needs NumPy 1.x (with NumPy 2 it crashes on BYTES tensors), so
TARGET brings numpy 1.26.4. The host's SciPy and scikit-learn are built for NumPy 2, and
transformers' generation utils import scikit-learn when it is installed ("Could not import module
'GenerationMixin'", "module 'numpy' has no attribute 'long'"), so VENV/host-site-packages holds
symlinks to every host entry except numpy, scipy and scikit-learn. The stub finds its packages
through the venv of the first `python3` on PATH, so VENV/bin goes first on PATH for tritonserver
and the notebook kernel.

Standard library only: it runs on a bare host with a system python3.
"""
from __future__ import annotations

import argparse
import hashlib
import json
from operator import eq, ge, gt, le, lt, ne
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MB = 10**6
MANIFEST = "MANIFEST.json"
MANYLINUX = (17, 24, 27, 28, 31, 34, 35, 39)
HIDDEN_FROM_HOST = ("numpy", "scipy", "sklearn", "scikit_learn")
CHECK = (
    "import numpy, ray, tritonclient.grpc, transformers, papermill, scripts\n"
    "assert numpy.__version__.startswith('1.'), f'NumPy {numpy.__version__}: the Triton stub needs 1.x'\n"
    "print(f'numpy {numpy.__version__}, ray {ray.__version__}, transformers {transformers.__version__}')"
)


def normalize(name: str) -> str:
    """PEP 503 name: lowercase, runs of `-_.` become one `-`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_requirements(path: Path) -> tuple[set[str], list[str]]:
    """(names of the requirement lines, the `# host-provides:` patterns) of a .in file."""
    required, provided = set(), []
    for line in path.read_text().splitlines():
        if line.startswith("# host-provides:"):
            provided += [normalize(n) for n in line.split(":", 1)[1].split()]
        elif (req := line.split("#")[0].strip()):
            required.add(normalize(re.split(r"[\s\[<>=!~;]", req, maxsplit=1)[0]))
    return required, provided


def host_provides(wheel: str, patterns: list[str]) -> bool:
    name = normalize(wheel.split("-")[0])
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


def filter_constraints(lock: Path) -> list[str]:
    """The lock's exact pins, less torch (the host's CUDA build stays) and vLLM (not installed)."""
    return [line for line in lock.read_text().splitlines()
            if "==" in line and not line.startswith(("#", "torch==")) and "vllm" not in line]


def apply_python_markers(text: str, python_version: str) -> str:
    """The requirements with `python_version <op> "X.Y"` markers decided for the host's Python:
    pip download evaluates markers against the running interpreter, even with --python-version."""
    ops = {"==": eq, "!=": ne, "<": lt, "<=": le, ">": gt, ">=": ge}
    host = tuple(map(int, python_version.split(".")))
    out = []
    for line in text.splitlines():
        m = re.fullmatch(r"([^;#]+);\s*python_version\s*(==|!=|<=|>=|<|>)\s*[\"']([\d.]+)[\"']\s*(#.*)?", line.strip())
        if not m:
            out.append(line)
        elif ops[m[2]](host, tuple(map(int, m[3].split(".")))):
            out.append(m[1].strip())
    return "\n".join(out) + "\n"


def download_command(python_version: str, dest: Path, requirements: Path, constraints: Path) -> list[str]:
    platforms = [f"manylinux_2_{n}_x86_64" for n in MANYLINUX] + ["manylinux2014_x86_64", "manylinux1_x86_64", "any"]
    return [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--python-version", python_version,
            "--implementation", "cp", *[a for p in platforms for a in ("--platform", p)],
            "-d", str(dest), "-r", str(requirements), "-c", str(constraints)]


def plan_parts(sizes: dict[str, int], part_bytes: int, reserve: int) -> list[dict]:
    """Pieces (name, wheel, offset, size, part) packed first-fit by descending size; part 1 keeps
    `reserve` bytes free for the manifest. A wheel bigger than a part's room is cut into chunks,
    each in a new part so that a wheel's chunks sit in consecutive parts."""
    room = part_bytes - reserve
    if room <= 0:
        raise SystemExit(f"--part-mb too small: the manifest alone takes {reserve} bytes")
    free: list[int] = []
    pieces: list[dict] = []

    def new_part() -> int:
        free.append(part_bytes - (reserve if not free else 0))
        return len(free) - 1

    for wheel, size in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])):
        if size <= room:
            i = next((i for i, f in enumerate(free) if f >= size), None)
            i = new_part() if i is None else i
            free[i] -= size
            pieces.append({"name": wheel, "wheel": wheel, "offset": 0, "size": size, "part": i + 1})
            continue
        for n, offset in enumerate(range(0, size, room)):
            i, length = new_part(), min(room, size - offset)
            free[i] -= length
            pieces.append({"name": f"{wheel}.chunk{n:03d}", "wheel": wheel, "offset": offset,
                           "size": length, "part": i + 1})
    return pieces


def render_manifest(wheels: dict[str, tuple[int, str]], pieces: list[dict]) -> bytes:
    entries = []
    for wheel, (size, sha) in sorted(wheels.items()):
        own = [p for p in pieces if p["wheel"] == wheel]
        whole = len(own) == 1 and own[0]["name"] == wheel
        entries.append({"filename": wheel, "size": size, "sha256": sha, "part": own[0]["part"] if whole else None,
                        "chunks": [] if whole else [{k: p[k] for k in ("name", "size", "part")} for p in own]})
    parts = max((p["part"] for p in pieces), default=1)
    return json.dumps({"parts": parts, "wheels": entries}, indent=1).encode() + b"\n"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def split(wheels_dir: Path, out: Path, part_bytes: int) -> list[Path]:
    """Write out/part1..partN from the files of wheels_dir; returns the part folders."""
    wheels = {p.name: (p.stat().st_size, sha256(p)) for p in sorted(wheels_dir.iterdir()) if p.is_file()}
    sizes = {name: size for name, (size, _) in wheels.items()}
    reserve = 0
    while True:  # the manifest names parts, so its size depends on the plan: settles in two rounds
        pieces = plan_parts(sizes, part_bytes, reserve)
        manifest = render_manifest(wheels, pieces)
        if len(manifest) <= reserve:
            break
        reserve = len(manifest) + 1024
    for old in out.glob("part[0-9]*"):
        shutil.rmtree(old)
    parts = [out / f"part{n}" for n in range(1, max((p["part"] for p in pieces), default=1) + 1)]
    for d in parts:
        d.mkdir(parents=True)
    for p in pieces:
        with (wheels_dir / p["wheel"]).open("rb") as src, (out / f"part{p['part']}" / p["name"]).open("wb") as dst:
            src.seek(p["offset"])
            dst.write(src.read(p["size"]))
    (parts[0] / MANIFEST).write_bytes(manifest)
    return parts


def build(args: argparse.Namespace) -> None:
    wheels_dir = args.out / "wheels"
    wheels_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        reqs, constraints = Path(tmp) / "requirements.txt", Path(tmp) / "constraints.txt"
        reqs.write_text(apply_python_markers(args.requirements.read_text(), args.python_version))
        constraints.write_text("\n".join(filter_constraints(args.constraints)) + "\n")
        subprocess.run(download_command(args.python_version, wheels_dir, reqs, constraints), check=True)
    required, provided = read_requirements(args.requirements)
    for wheel in sorted(wheels_dir.glob("*.whl")):
        if normalize(wheel.name.split("-")[0]) not in required and host_provides(wheel.name, provided):
            print(f"host provides {wheel.name}: dropped")
            wheel.unlink()
    parts = split(wheels_dir, args.out, int(args.part_mb * MB))
    print(f"{'part':<8}{'files':>6}{'MB':>9}")
    for d in parts:
        files = list(d.iterdir())
        print(f"{d.name:<8}{len(files):>6}{sum(f.stat().st_size for f in files) / MB:>9.1f}")
    print(f"{len(parts)} parts, {sum(f.stat().st_size for d in parts for f in d.iterdir()) / MB:.1f} MB in {args.out}")


def assemble(dirs: list[Path], scratch: Path) -> list[Path]:
    """The checked wheels of the part folders (any order); chunked wheels are joined in scratch."""
    files = {f.name: f for d in dirs for f in d.iterdir() if f.is_file()}
    if MANIFEST not in files:
        raise SystemExit(f"{MANIFEST} not found in {', '.join(map(str, dirs))}: pass part1 too")
    manifest = json.loads(files[MANIFEST].read_text())
    missing: dict[int, list[str]] = {}
    for w in manifest["wheels"]:
        for name, part in [(c["name"], c["part"]) for c in w["chunks"]] or [(w["filename"], w["part"])]:
            if name not in files:
                missing.setdefault(part, []).append(name)
    if missing:
        raise SystemExit("missing parts: " + "; ".join(f"part{n} ({', '.join(names)})" for n, names in sorted(missing.items())))
    wheels = []
    for w in manifest["wheels"]:
        path = files.get(w["filename"]) if not w["chunks"] else scratch / w["filename"]
        if w["chunks"]:
            with path.open("wb") as dst:
                for c in w["chunks"]:
                    dst.write(files[c["name"]].read_bytes())
        if path.stat().st_size != w["size"] or sha256(path) != w["sha256"]:
            raise SystemExit(f"{w['filename']}: size or sha256 differs from the manifest (damaged copy)")
        wheels.append(path)
    return wheels


def curate_host_site(host_site: Path, dest: Path) -> None:
    """dest: symlinks to every entry of host_site except NumPy, SciPy and scikit-learn."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for entry in sorted(host_site.iterdir()):
        if not entry.name.lower().startswith(HIDDEN_FROM_HOST):
            (dest / entry.name).symlink_to(entry)


def install(args: argparse.Namespace) -> None:
    target, venv = args.target.resolve(), args.venv.resolve()
    if target.exists() and any(target.iterdir()):
        raise SystemExit(f"{target} is not empty: remove it first (all wheels go in with one pip call)")
    with tempfile.TemporaryDirectory() as scratch:
        wheels = assemble(args.dirs, Path(scratch))
        subprocess.run([args.pip_python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--target", str(target), *map(str, wheels)], check=True)
    subprocess.run([args.python, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = sorted(venv.glob("lib/python3.*/site-packages"))
    if len(site) != 1:
        raise SystemExit(f"expected one lib/python3.X/site-packages in {venv}, found {len(site)}")
    curate_host_site(args.host_site_packages, venv / "host-site-packages")
    (site[0] / "tutorial.pth").write_text(f"{target}\n{venv / 'host-site-packages'}\n{args.repo.resolve()}\n")
    check = subprocess.run([str(venv / "bin" / "python"), "-c", CHECK], capture_output=True, text=True)
    if check.returncode:
        raise SystemExit(f"check failed in {venv}:\n{check.stderr}")
    print(check.stdout.strip())
    print(f"put the stub's environment first on PATH (tritonserver, notebook kernel):\nexport PATH={venv}/bin:$PATH")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="download and split the wheels (connected machine)")
    b.add_argument("--python-version", required=True, help="the host's Python, e.g. 3.12")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--part-mb", type=float, default=60)
    b.add_argument("--requirements", type=Path, default=REPO / "env" / "requirements-gpu-transformers.in")
    b.add_argument("--constraints", type=Path, default=REPO / "env" / "requirements-cpu.lock")
    i = sub.add_parser("install", help="join, check and install the wheels (GPU host)")
    i.add_argument("--from", dest="dirs", type=Path, nargs="+", required=True, help="the part folders")
    i.add_argument("--target", type=Path, required=True)
    i.add_argument("--venv", type=Path, required=True)
    i.add_argument("--python", default=f"/usr/bin/python3.{sys.version_info.minor}", help="the venv's interpreter")
    i.add_argument("--pip-python", default=sys.executable, help="the interpreter whose pip installs")
    i.add_argument("--host-site-packages", type=Path, default=Path(sysconfig.get_paths()["purelib"]))
    i.add_argument("--repo", type=Path, default=REPO)
    args = parser.parse_args(argv)
    build(args) if args.command == "build" else install(args)


if __name__ == "__main__":
    main()
