# One image for every component of a deployment (see docker-compose.yml): the SuperLink runs
# the ServerApp and each SuperNode runs the ClientApp in subprocesses of the same container, so
# all of them need the app's dependencies (torch included).
#
#   docker build -t fedcgd:latest .                       # FROM python:3.11-slim (a registry)
#   docker build --network host -t fedcgd:latest \
#     --build-arg BASE_IMAGE=fedcgd-base:bookworm \
#     --build-arg CA_BUNDLE=build/compose/ca-bundle.crt .  # what `make test-compose` runs
#
# BASE_IMAGE: any Debian-like image. One without Python (a debootstrapped Debian) gets
# python3 and python3-venv from apt; the app is installed into the venv /opt/venv either way.
# CA_BUNDLE: optional path, inside the build context, of a CA bundle that pip must trust
# (a TLS-intercepting proxy), used only by the pip install step.
# PIP_ARGS: extra pip arguments, e.g. a CPU-only torch index:
#   --build-arg PIP_ARGS="--extra-index-url https://download.pytorch.org/whl/cpu"
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE} AS python
# Lets scripts/test_compose.sh prune this project's superseded images, and only those.
LABEL org.opencontainers.image.title=fedcgd

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 \
    FLWR_HOME=/flwr \
    HOME=/home/fedcgd \
    PATH=/opt/venv/bin:$PATH

# Python (only where the base has none) and a venv. Folders the components write to are
# writable by any user, so a service may run as the host's user (docker-compose.yml `user:`).
RUN if ! command -v python3 >/dev/null 2>&1; then \
        apt-get update \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            python3 python3-venv \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && python3 -m venv /opt/venv \
    && mkdir -p /results /data /flwr /home/fedcgd \
    && chmod 1777 /results /data /flwr /home/fedcgd

# The dependency list alone (and the optional CA bundle, as ca.crt, empty without one): the
# next stage copies just these, so edits elsewhere in pyproject.toml keep its cached layer
# with the installed dependencies (torch: GBs).
FROM python AS requirements
ARG CA_BUNDLE=""
# (An empty source would copy the whole context: without a bundle, pyproject.toml twice.)
COPY pyproject.toml ${CA_BUNDLE:-pyproject.toml} /tmp/build/
RUN cd /tmp/build \
    && python -c "import tomllib; \
print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > requirements.txt \
    && if [ -z "${CA_BUNDLE}" ]; then : > ca.crt; \
       elif [ "$(basename "${CA_BUNDLE}")" != ca.crt ]; then mv "$(basename "${CA_BUNDLE}")" ca.crt; fi \
    && rm pyproject.toml

FROM python
WORKDIR /app
ARG PIP_ARGS=""
COPY --from=requirements /tmp/build/ /tmp/build/
RUN if [ -s /tmp/build/ca.crt ]; then \
        export PIP_CERT=/tmp/build/ca.crt REQUESTS_CA_BUNDLE=/tmp/build/ca.crt; \
    fi \
    && pip install ${PIP_ARGS} -r /tmp/build/requirements.txt hatchling

# The app itself: no downloads (dependencies above, hatchling for the build backend).
COPY pyproject.toml README.md ./
COPY channel ./channel
COPY client_app ./client_app
COPY fedcgd_strategy ./fedcgd_strategy
COPY fedcgd_task ./fedcgd_task
COPY fedcgd_config ./fedcgd_config
COPY server_app ./server_app
COPY experiments ./experiments
RUN pip install --no-deps --no-build-isolation . && rm -rf /tmp/build
