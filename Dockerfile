# One image for every component of a deployment (see docker-compose.yml): the SuperLink runs
# the ServerApp and each SuperNode runs the ClientApp in subprocesses of the same container, so
# all of them need the app's dependencies (torch included).
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 \
    FLWR_HOME=/flwr

WORKDIR /app
COPY pyproject.toml README.md ./
COPY channel ./channel
COPY client_app ./client_app
COPY fedcgd_strategy ./fedcgd_strategy
COPY task ./task
COPY server_app ./server_app
# Extra pip arguments, e.g. a CPU-only torch index: --build-arg PIP_ARGS="--extra-index-url …"
ARG PIP_ARGS=""
RUN pip install ${PIP_ARGS} . && mkdir -p /results /data /flwr
