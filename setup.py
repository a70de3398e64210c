"""Builds the lattn Python package with CMake (called by pip through pyproject.toml).

    python3 -m pip install --no-build-isolation .

The extension lattn._lattn and liblattn are built by this repository's CMake
for the interpreter running pip, then installed (CMake component
lattn_python) next to the package's .py files; the extension finds liblattn
through its $ORIGIN rpath. Nothing is downloaded.

Environment:
  LATTN_CUDA        AUTO (default: build the CUDA backends when nvcc is found), ON or OFF
  LATTN_BUILD_DIR   reuse this already configured CMake build directory
                    (configured with -DLATTN_PYTHON=ON for the same interpreter)
  CMAKE_BUILD_PARALLEL_LEVEL  build jobs (default: the number of CPUs)
"""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(lattn VERSION ([0-9.]+)", text).group(1)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build_dir = os.environ.get("LATTN_BUILD_DIR")
        if build_dir:
            build_dir = Path(build_dir).resolve()
        else:
            build_dir = Path(self.build_temp).resolve() / "cmake"
            self.run_cmake(
                "-S", str(ROOT), "-B", str(build_dir),
                "-DCMAKE_BUILD_TYPE=Release",
                "-DLATTN_PYTHON=ON",
                f"-DLATTN_PYTHON_EXECUTABLE={sys.executable}",
                f"-DLATTN_CUDA={os.environ.get('LATTN_CUDA', 'AUTO')}",
                "-DLATTN_TESTS=OFF",
                "-DLATTN_BENCH=OFF",
            )
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        self.run_cmake("--build", str(build_dir), "--target", "lattn_python", "-j", jobs)
        staging = Path(self.build_temp).resolve() / "install"
        shutil.rmtree(staging, ignore_errors=True)
        self.run_cmake("--install", str(build_dir), "--component", "lattn_python", "--prefix", str(staging))

        suffix = sysconfig.get_config_var("EXT_SUFFIX")
        modules = list(staging.rglob(f"_lattn{suffix}"))
        if len(modules) != 1:
            found = [str(p) for p in staging.rglob("_lattn*")]
            raise RuntimeError(
                f"expected one _lattn{suffix} in {staging} (built for this interpreter, "
                f"{sys.executable}), found {found or 'none'}")
        installed = modules[0].parent
        target = Path(self.get_ext_fullpath(ext.name)).parent
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(modules[0], target / modules[0].name)
        # liblattn under its SONAME (liblattn.so.<major>), the name the module
        # asks for; wheels hold no symlinks, so copy the file it points to.
        for lib in installed.glob("liblattn.so.*"):
            if lib.is_symlink() and re.fullmatch(r"liblattn\.so\.\d+", lib.name):
                shutil.copyfile(lib.resolve(), target / lib.name)

    def run_cmake(self, *args):
        print("cmake", " ".join(args), flush=True)
        subprocess.run(["cmake", *args], check=True)


setup(
    version=project_version(),
    packages=["lattn"],
    package_dir={"": "python"},
    # The type stubs of the extension (PEP 561).
    package_data={"lattn": ["*.pyi", "py.typed"]},
    ext_modules=[CMakeExtension("lattn._lattn")],
    cmdclass={"build_ext": CMakeBuild},
    # Keep setuptools' build files out of the CMake build directory ./build.
    options={"build": {"build_base": "build-pip"}},
    zip_safe=False,
)
