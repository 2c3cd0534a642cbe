"""The PEP 517 build backend of `pip install .`: a wheel of chorus_torch made by Chorus's own build.

    .torch-venv/bin/pip install --no-build-isolation .        # into the Python that has torch

The wheel is built for the Python that runs pip and the PyTorch 2.x installed in it: CMake
configures Chorus with CHORUS_TORCH_PYTHON set to that Python, builds the extension (and
libchorus with it), and `cmake --install --component chorus_torch` lays out the package:
chorus_torch/__init__.py, the extension, and libchorus.so.N beside it (the extension's RPATH is
$ORIGIN). The wheel requires the exact torch it was built against: a C++ extension is bound to
that version's ABI.

config_settings (pip's --config-settings KEY=VALUE):
    build-dir   an existing build tree to build and package from instead of <source>/build-wheel
                (it must have been configured for the torch that pip's Python imports: the same
                version from the same folder, in the same environment; nothing is reconfigured)
    jobs        build jobs (default: every core)
    cuda-architectures
                the GPU architectures of the device code, as CHORUS_CUDA_ARCHITECTURES (default: the
                GPUs nvidia-smi lists on the building machine, or 90 where it lists none; "75;80;90"
                for a wheel that runs on all three; a new build tree only)

The build compiles libchorus (with the device code where the CUDA toolkit is found) and the
extension, nothing else: on 2 cores 4 to 20 minutes with device code for one architecture, by the
machine, most of it the launch kernel's compile, and minutes more for each further architecture.
"""
import base64
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAME = "chorus_torch"


def _version():
    with open(os.path.join(SOURCE, "CMakeLists.txt")) as f:
        for line in f:
            if line.startswith("project(Chorus VERSION "):
                return line.split()[2]
    raise RuntimeError("chorus_build: no project version in CMakeLists.txt")


def _clean_env():
    """The environment of pip's caller: build isolation puts its own site on PYTHONPATH, which hides
    the torch this wheel is built against from the Python that CMake runs."""
    env = dict(os.environ)
    for key in ("PYTHONPATH", "PYTHONNOUSERSITE", "PYTHONHOME"):
        env.pop(key, None)
    return env


# What a build tree records of the torch its extension is built against (python/CMakeLists.txt sets
# these cache entries), by the key of _torch()'s answer. The interpreter alone says too little:
# every venv of one interpreter resolves to the same binary, and each may hold another torch.
_RECORDED = {"version": "CHORUS_TORCH_VERSION", "dir": "CHORUS_TORCH_DIR", "prefix": "CHORUS_TORCH_PREFIX"}


def _torch(env):
    """The torch pip's Python imports: {"version": torch.__version__, "dir": its package folder,
    "prefix": sys.prefix}, the folders resolved as python/CMakeLists.txt resolves them."""
    code = ("import os, sys, torch; print(torch.__version__); print(os.path.realpath(os.path.dirname(torch.__file__)));"
            " print(os.path.realpath(sys.prefix))")
    probe = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if probe.returncode != 0:
        raise RuntimeError(
            f"chorus_build: {sys.executable} cannot import torch, and chorus_torch is built against the PyTorch "
            f"installed where it goes: install torch 2.x into this Python first (pip install torch==2.11.0), "
            f"then run pip install --no-build-isolation . ({probe.stderr.strip().splitlines()[-1:]})")
    version, torch_dir, prefix = probe.stdout.strip().splitlines()[-3:]
    return {"version": version, "dir": torch_dir, "prefix": prefix}


def _run(cmd, env):
    print("chorus_build: " + " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env, stdout=sys.stderr)


def _cache_value(build, key):
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith(key + ":"):
                return line.split("=", 1)[1].strip()
    return ""


def _check_build_tree(build, torch, named):
    """Refuses a configured build tree whose extension is (or would be) built against another torch
    than `torch`: the wheel would require this torch and hold a binary for the other. `named`: the
    tree came from the build-dir setting, not the default <source>/build-wheel."""
    recorded = {field: _cache_value(build, key) for field, key in _RECORDED.items()}
    if recorded == torch:
        return

    def describe(t):
        return f"torch {t['version']} from {t['dir']} in the environment {t['prefix']}"

    had = (describe(recorded) if all(recorded.values()) else
           "no torch recorded (configured by an older Chorus, or CMake found no torch 2.x there)")
    python = _cache_value(build, "CHORUS_TORCH_PYTHON") or "(none)"
    fix = (f"drop --config-settings build-dir={build} (pip then builds in {os.path.join(SOURCE, 'build-wheel')}) "
           f"or name a build tree made for this Python" if named else
           f"remove it (rm -rf {build}) and run pip again, which configures it anew for this Python")
    raise RuntimeError(f"chorus_build: {build} was configured for the torch of {python}, not the one {sys.executable} "
                       f"imports: the build tree has {had}; this Python has {describe(torch)}. A wheel from it "
                       f"would require this torch and hold an extension built against the other: {fix}, or "
                       f"reconfigure it with cmake {build} -DCHORUS_TORCH_PYTHON={sys.executable}")


def _build(config, env, torch):
    build = config.get("build-dir") or os.path.join(SOURCE, "build-wheel")
    build = os.path.abspath(build)
    jobs = str(config.get("jobs") or os.cpu_count() or 1)
    if os.path.exists(os.path.join(build, "CMakeCache.txt")):
        _check_build_tree(build, torch, named=bool(config.get("build-dir")))
    else:
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        archs = config.get("cuda-architectures")
        arch_args = [f"-DCHORUS_CUDA_ARCHITECTURES={archs}"] if archs else []
        _run(["cmake", "-S", SOURCE, "-B", build, *generator, "-DCMAKE_BUILD_TYPE=Release",
              f"-DCHORUS_TORCH_PYTHON={sys.executable}", "-DCHORUS_BUILD_TESTS=OFF", "-DCHORUS_BUILD_PERF=OFF",
              *arch_args], env)
    _run(["cmake", "--build", build, "-j", jobs, "--target", "chorus_torch_ext"], env)
    if not os.path.isdir(os.path.join(build, "python", NAME)):
        raise RuntimeError(f"chorus_build: {build} has no python/{NAME}: CMake did not build the backend "
                           f"(its configure log says why)")
    return build


def _tag():
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{impl}-{impl}-{platform}"


def _record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def _metadata(version, torch_version):
    return (f"Metadata-Version: 2.1\nName: chorus-torch\nVersion: {version}\n"
            f"Summary: Chorus collective communication as a torch.distributed backend (\"chorus\")\n"
            f"Requires-Python: =={sys.version_info.major}.{sys.version_info.minor}.*\n"
            f"Requires-Dist: torch=={torch_version.split('+')[0]}\n")


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    config = config_settings or {}
    env = _clean_env()
    torch = _torch(env)
    torch_version = torch["version"]
    version = _version()
    build = _build(config, env, torch)
    tag = _tag()
    dist_info = f"{NAME}-{version}.dist-info"
    wheel_name = f"{NAME}-{version}-{tag}.whl"
    with tempfile.TemporaryDirectory() as stage:
        _run(["cmake", "--install", build, "--component", NAME, "--prefix", stage], env)
        # libchorus.so.N (the name the extension needs) is a link to libchorus.so.N.M.P: the wheel
        # holds the library once, under the link's name.
        files, linked = [], set()
        for root, _, names in os.walk(os.path.join(stage, NAME)):
            for n in sorted(names):
                full = os.path.join(root, n)
                if os.path.islink(full):
                    linked.add(os.path.realpath(full))
                files.append((os.path.relpath(full, stage), full))
        files = [(rel, full) for rel, full in files if os.path.islink(full) or os.path.realpath(full) not in linked]
        if not any(os.path.basename(p).startswith("_C") for p, _ in files):
            raise RuntimeError(f"chorus_build: the install of {build} holds no extension: {[p for p, _ in files]}")
        os.makedirs(wheel_directory, exist_ok=True)
        record = []
        with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w", zipfile.ZIP_DEFLATED) as whl:
            for rel, full in files:
                with open(full, "rb") as f:
                    data = f.read()
                info = zipfile.ZipInfo(rel)
                info.external_attr = (os.stat(full).st_mode & 0o777) << 16
                whl.writestr(info, data, zipfile.ZIP_DEFLATED)
                record.append(_record_line(rel, data))
            meta = {
                "METADATA": _metadata(version, torch_version),
                "WHEEL": f"Wheel-Version: 1.0\nGenerator: chorus_build\nRoot-Is-Purelib: false\nTag: {tag}\n",
                "top_level.txt": f"{NAME}\n",
            }
            for n, text in meta.items():
                rel = f"{dist_info}/{n}"
                whl.writestr(rel, text)
                record.append(_record_line(rel, text.encode()))
            record.append(f"{dist_info}/RECORD,,")
            whl.writestr(f"{dist_info}/RECORD", "\n".join(record) + "\n")
    print(f"chorus_build: {wheel_name} (torch {torch_version}, from {build})", flush=True)
    return wheel_name
