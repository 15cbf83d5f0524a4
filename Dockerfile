# One image for every role of the platform: Anna routing, memory and disk nodes, the monitor,
# schedulers and executor nodes. The command chooses the role:
#   docker run IMAGE python -m k8s.entrypoint routing|node|monitor|scheduler|executor
#   docker run IMAGE anna keys /keys --client alice
# k8s/ holds manifests that run it (k8s/README.md).
#
# Build with Docker:   docker build -t cloudburst:dev .
# Without a daemon:    scripts/k8s/image.sh   (buildah against a local debootstrap base)
FROM debian:bookworm

ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/cloudburst \
    PATH=/opt/cloudburst/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# System packages, as scripts/install.sh lists them (without the Redis benchmark peer),
# plus Python. The kernel links Debian's libzmq, libprotobuf, librocksdb and libssl.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      ca-certificates \
      build-essential pkg-config \
      libzmq3-dev cppzmq-dev libsodium-dev libssl-dev \
      libprotobuf-dev protobuf-compiler \
      librocksdb-dev \
      python3 python3-dev python3-venv \
 && rm -rf /var/lib/apt/lists/*

# Pinned Python dependencies: the runtime ones from requirements.txt (the test and benchmark
# ones are left out). pyzmq is built against Debian's libzmq, whose libsodium makes CURVE
# about 20x faster than the wheel's (benchmarks/README.md, "What authentication costs").
# PIP_CERT: a CA bundle for pip, for builds behind a TLS-intercepting proxy (the default is
# the image's own bundle; scripts/k8s/image.sh mounts the build machine's bundle there).
ARG PIP_CERT=/etc/ssl/certs/ca-certificates.crt
COPY requirements.txt /tmp/requirements.txt
RUN python3 -m venv "$VIRTUAL_ENV" \
 && grep -E '^(protobuf|cloudpickle|pybind11|wheel|kubernetes|boto3)[=<>]' /tmp/requirements.txt \
      | sed 's/ *#.*//' > /tmp/requirements-image.txt \
 && pip install -r /tmp/requirements-image.txt setuptools \
 && pip install --no-binary pyzmq "$(grep -E '^pyzmq==' /tmp/requirements.txt | cut -d' ' -f1)" \
 && python -c 'import zmq; assert zmq.has("curve"), "pyzmq without CURVE"; print("pyzmq", zmq.pyzmq_version(), "libzmq", zmq.zmq_version())' \
 && rm /tmp/requirements.txt /tmp/requirements-image.txt

# The platform: generate the wire code, compile the Anna kernel, install the packages.
COPY . /src
RUN cd /src \
 && ANNA_BUILD_JOBS="$(nproc)" pip install --no-build-isolation . \
 && cd / && rm -rf /src \
 && python -c 'import anna_core._core, hydro_proto, scheduler, executor, cloudburst; print("platform installed")'

# Unprivileged by default; the disk tier writes under /data (a volume in k8s/).
RUN useradd --system --uid 10001 --home-dir /var/lib/cloudburst --create-home cloudburst \
 && mkdir -p /data && chown cloudburst /data
USER 10001
WORKDIR /var/lib/cloudburst

# No ENTRYPOINT: the command is the role. Every process handles SIGTERM itself (a graceful
# leave for Anna nodes), so it may run as PID 1; k8s.entrypoint execs it.
CMD ["anna", "--help"]
