"""Build the platform: generate wire code from proto/ and compile the Anna kernel.

C++ protobuf code is generated with the system `protoc` so that it matches the system
libprotobuf it links against. Python protobuf code is generated into the `hydro_proto`
package (never committed); cross-file imports are rewritten to package-relative ones.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext, naive_recompile
from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_DIR = os.path.join(HERE, "proto")
CPP_GEN_DIR = os.path.join(HERE, "build", "gen")
PY_GEN_DIR = os.path.join(HERE, "hydro_proto")


def find_protoc() -> str:
    protoc = shutil.which("protoc")
    if protoc is None:
        sys.exit("setup.py: `protoc` not found; install Debian's protobuf-compiler "
                 "(scripts/install.sh does this)")
    return protoc


def generate_wire_code() -> None:
    protoc = find_protoc()
    protos = sorted(glob.glob(os.path.join(PROTO_DIR, "*.proto")))
    os.makedirs(CPP_GEN_DIR, exist_ok=True)
    os.makedirs(PY_GEN_DIR, exist_ok=True)
    subprocess.check_call([protoc, f"-I{PROTO_DIR}", f"--cpp_out={CPP_GEN_DIR}",
                           f"--python_out={PY_GEN_DIR}", *protos])
    names = []
    for path in sorted(glob.glob(os.path.join(PY_GEN_DIR, "*_pb2.py"))):
        with open(path) as f:
            text = f.read()
        fixed = re.sub(r"^import (\w+_pb2) as", r"from . import \1 as", text, flags=re.M)
        if fixed != text:
            with open(path, "w") as f:
                f.write(fixed)
        names.append(os.path.basename(path)[:-3])
    with open(os.path.join(PY_GEN_DIR, "__init__.py"), "w") as f:
        f.write('"""Generated from proto/ at build time. Do not edit."""\n')
        for name in names:
            f.write(f"from . import {name}  # noqa: F401\n")


generate_wire_code()
ParallelCompile("ANNA_BUILD_JOBS", default=2, needs_recompile=naive_recompile).install()

kernel_sources = sorted(glob.glob(os.path.join("anna_core", "csrc", "*.cpp")))
kernel_sources += sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(CPP_GEN_DIR, "*.pb.cc")))

ext_modules = [
    Pybind11Extension(
        "anna_core._core",
        kernel_sources,
        include_dirs=[os.path.join("anna_core", "csrc"), CPP_GEN_DIR],
        libraries=["zmq", "protobuf", "rocksdb", "pthread"],
        cxx_std=17,
        extra_compile_args=["-O2", "-g0", "-Wall", "-Wno-unused-parameter"],
    ),
]

setup(
    name="cloudburst-hydro",
    version="0.1.0",
    description="A stateful function-as-a-service platform on the Anna lattice KVS",
    packages=find_packages(include=["anna_core*", "hydro_proto*", "hydrocache*", "scheduler*",
                                    "executor*", "cloudburst*", "k8s*"]),
    ext_modules=ext_modules,
    cmdclass={"build_ext": build_ext},
    python_requires=">=3.10",
    install_requires=[
        "pyzmq>=26", "protobuf>=5", "cloudpickle>=3",
    ],
    entry_points={"console_scripts": ["anna=anna_core.cli:main",
                                     "cloudburst=cloudburst.cli:main"]},
    zip_safe=False,
)
