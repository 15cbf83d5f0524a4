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
import tempfile

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
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


def replace_if_changed(src_dir: str, dst_dir: str) -> None:
    """Copy generated files over, leaving unchanged ones untouched so their mtimes (and so
    the incremental C++ build) stay valid."""
    os.makedirs(dst_dir, exist_ok=True)
    for name in os.listdir(src_dir):
        src, dst = os.path.join(src_dir, name), os.path.join(dst_dir, name)
        with open(src, "rb") as f:
            new = f.read()
        if os.path.exists(dst):
            with open(dst, "rb") as f:
                if f.read() == new:
                    continue
        with open(dst, "wb") as f:
            f.write(new)


def generate_wire_code() -> None:
    protoc = find_protoc()
    protos = sorted(glob.glob(os.path.join(PROTO_DIR, "*.proto")))
    with tempfile.TemporaryDirectory() as tmp:
        cpp_tmp, py_tmp = os.path.join(tmp, "cpp"), os.path.join(tmp, "py")
        os.makedirs(cpp_tmp)
        os.makedirs(py_tmp)
        subprocess.check_call([protoc, f"-I{PROTO_DIR}", f"--cpp_out={cpp_tmp}",
                               f"--python_out={py_tmp}", *protos])
        names = []
        for path in sorted(glob.glob(os.path.join(py_tmp, "*_pb2.py"))):
            with open(path) as f:
                text = f.read()
            with open(path, "w") as f:
                f.write(re.sub(r"^import (\w+_pb2) as", r"from . import \1 as", text, flags=re.M))
            names.append(os.path.basename(path)[:-3])
        with open(os.path.join(py_tmp, "__init__.py"), "w") as f:
            f.write('"""Generated from proto/ at build time. Do not edit."""\n')
            for name in names:
                f.write(f"from . import {name}  # noqa: F401\n")
        replace_if_changed(cpp_tmp, CPP_GEN_DIR)
        replace_if_changed(py_tmp, PY_GEN_DIR)


def newest_header_mtime() -> float:
    headers = glob.glob(os.path.join(HERE, "anna_core", "csrc", "*.hpp"))
    headers += glob.glob(os.path.join(CPP_GEN_DIR, "*.pb.h"))
    return max((os.stat(h).st_mtime for h in headers), default=0.0)


def recompile_if_stale(obj: str, src: str) -> bool:
    """Recompile when the source or any kernel/generated header is newer than the object.

    Headers define class layouts shared across files, so a header change must rebuild every
    object; comparing only the .cpp with its .o links stale layouts together.
    """
    if not os.path.exists(obj):
        return True
    built = os.stat(obj).st_mtime
    return os.stat(src).st_mtime >= built or newest_header_mtime() >= built


generate_wire_code()
ParallelCompile("ANNA_BUILD_JOBS", default=2, needs_recompile=recompile_if_stale).install()

kernel_sources = sorted(glob.glob(os.path.join("anna_core", "csrc", "*.cpp")))
kernel_sources += sorted(os.path.relpath(p, HERE) for p in glob.glob(os.path.join(CPP_GEN_DIR, "*.pb.cc")))

ext_modules = [
    Pybind11Extension(
        "anna_core._core",
        kernel_sources,
        include_dirs=[os.path.join("anna_core", "csrc"), CPP_GEN_DIR],
        libraries=["zmq", "sodium", "protobuf", "rocksdb", "ssl", "crypto", "pthread"],
        cxx_std=17,
        extra_compile_args=["-O2", "-g0", "-Wall", "-Wno-unused-parameter"],
    ),
]

setup(
    name="cloudburst-hydro",
    version="0.1.0",
    description="A stateful function-as-a-service platform on the Anna lattice KVS",
    packages=find_packages(include=["anna_core*", "hydro_proto*", "hydrocache*", "runtime*", "faas*",
                                    "scheduler*",
                                    "executor*", "cloudburst*", "pools*", "k8s*"]),
    # The Kubernetes manifests: `cloudburst k8s deploy` applies them from the installed package.
    package_data={"k8s": ["kustomization.yaml", "base/*.yaml", "rbac/*.yaml"]},
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
