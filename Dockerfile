# chaosproxy as a sidecar: docker run -p 8080:8080 -v "$PWD/my-scenarios:/scenarios" chaosproxy
# (the built-in library, the repository's scenarios/, is built into the package; the
# image's /scenarios adds to it and may stay empty)
#
# The image starts with no configuration: the proxy on 0.0.0.0:8080, the admin API on
# loopback inside the container only (the HEALTHCHECK uses it there). To publish the
# admin API, give it an address and a token, and publish it on the host's loopback:
#   docker run -p 8080:8080 -p 127.0.0.1:8478:8478 -e CHAOSPROXY_ADMIN=0.0.0.0:8478
#     -e CHAOSPROXY_ADMIN_TOKEN=... chaosproxy
# (off loopback without a token it refuses to start). Settings come from CHAOSPROXY_*
# variables, so the command below passes no flag that would override them.
#
# Three stages, so that editing the source rebuilds only what it must: the dependencies
# (a layer that changes only with pyproject.toml), the wheel (the compiled build: a C
# compiler and the build's tools in layers of their own, then the source, compiled with
# mypyc: about a minute, nearly all of a rebuild), and the image (the dependencies'
# layer, then the wheel installed: no source tree, and no compiler, in it).
# Plain Dockerfile syntax, no BuildKit feature: it builds on old and new engines alike.

# ----------------------------------------------------------------- the dependencies
FROM python:3.11-slim AS dependencies
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
# The image's virtual environment holds the dependencies only (no pip: the base's pip
# installs into it), read from pyproject.toml alone, so the source is not needed yet.
COPY pyproject.toml /build/
RUN python -m venv --without-pip /opt/chaosproxy \
    && python -c "import tomllib; print(*tomllib.load(open('/build/pyproject.toml', 'rb'))['project']['dependencies'], sep='\n')" > /build/requirements.txt \
    && python -m pip --python /opt/chaosproxy/bin/python install --requirement /build/requirements.txt

# ----------------------------------------------------------------- the wheel
FROM dependencies AS wheel
# The compiled build: setup.py compiles the hot modules with mypyc (docs/architecture.md,
# Compiled modules), which takes a C compiler and Python's headers here, and mypy in the
# build backend's environment. Nothing of this stage but the wheel reaches the image.
# With the official python:3.11-slim, gcc and libc6-dev are all it takes: its Python
# (/usr/local) ships its headers. A base whose Python is Debian's own (such as a local
# stand-in for python:3.11-slim made with debootstrap) keeps Python.h in python3-dev:
# installed only where the interpreter's include directory lacks it (on the official
# image it would add a second, Debian Python that the build never uses). Unpinned: the
# base's Debian release decides the versions, as it does for the base itself.
# hadolint ignore=DL3008
RUN headers=$(python -c "import sysconfig; print(sysconfig.get_path('include'))") \
    && apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev \
    && if [ ! -f "$headers/Python.h" ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-dev; fi \
    && rm -rf /var/lib/apt/lists/*
# The build backend and mypy (pyproject.toml's build-system requires), in an environment
# of their own, called directly (PEP 517): no build isolation, nothing downloaded when
# only the source changed, and seconds faster than pip wheel. Its output is shown only
# when it fails: the legacy builder streams every line through the daemon, which took
# longer than the build itself.
RUN python -m venv --without-pip /opt/build \
    && python -c "import tomllib; print(*tomllib.load(open('/build/pyproject.toml', 'rb'))['build-system']['requires'], sep='\n')" > /build/build-requirements.txt \
    && python -m pip --python /opt/build/bin/python install --requirement /build/build-requirements.txt
WORKDIR /build
COPY README.md LICENSE setup.py ./
COPY chaosproxy ./chaosproxy
# The scenario library: setup.py builds it into the package (the build fails without it).
COPY scenarios ./scenarios
# setup.py falls back to a pure wheel where the compiler fails: here that is an error,
# with its reason, never an image that is silently pure. The last line says the wheel
# and how long it took (tests/container/ reads it).
RUN start=$(date +%s); \
    /opt/build/bin/python -c "import setuptools.build_meta as backend; backend.build_wheel('/dist')" \
    > /tmp/build.log 2>&1 || { cat /tmp/build.log; exit 1; }; \
    if ls /dist/*-none-any.whl > /dev/null 2>&1; then \
      grep "building the pure package" /tmp/build.log; echo "the wheel is pure: no image"; exit 1; \
    fi; \
    echo "built $(ls /dist) in $(($(date +%s) - start))s"

# ----------------------------------------------------------------- the image
FROM python:3.11-slim
# /logs and /traces belong to the image's user, so that a named volume mounted there
# (which starts as a copy of the image's directory) is writable: CHAOSPROXY_LOG=/logs/...,
# CHAOSPROXY_TRACE_DIR=/traces.
RUN groupadd --system --gid 10001 chaosproxy \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent chaosproxy \
    && mkdir /scenarios /logs /traces \
    && chown 10001:10001 /logs /traces
COPY --from=dependencies /opt/chaosproxy /opt/chaosproxy

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    CHAOSPROXY_SCENARIOS=/scenarios \
    CHAOSPROXY_LISTEN=0.0.0.0:8080 \
    CHAOSPROXY_ADMIN=127.0.0.1:8478
WORKDIR /logs
# 8478 (the admin API) is reachable from outside only once CHAOSPROXY_ADMIN publishes it.
EXPOSE 8080 8478
# SIGTERM (docker stop): streams in flight get --grace (2s), the process exits within 3s.
STOPSIGNAL SIGTERM
# GET /health on the admin API (CHAOSPROXY_ADMIN; a wildcard asked on loopback), or with
# the admin off a connection to the proxy's port. A short interval, because an engine
# without --start-interval (Docker < 25) first checks one interval after the start.
HEALTHCHECK --interval=2s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-m", "chaosproxy.healthcheck"]
ENTRYPOINT ["chaosproxy"]
CMD ["serve"]

# The application last, so that an edit of the source rebuilds only what follows: the
# wheel installed (by the base's pip, compiled, no dependency fetched), then the
# environment's commands first on the PATH, then the user.
COPY --from=wheel /dist /dist
RUN python -m pip --python /opt/chaosproxy/bin/python install --quiet --no-cache-dir \
    --disable-pip-version-check --no-deps --no-index /dist/chaosproxy-*.whl \
    && rm -rf /dist
ENV PATH=/opt/chaosproxy/bin:$PATH
USER 10001:10001
