#!/usr/bin/env bash
# The compose deployment for real (make test-compose): build the image, start a TLS SuperLink
# and four authenticated SuperNodes with docker-compose on host networking (loopback only), run
# 2 rounds of fedcgd-fscd on digits with `flwr run` from the host, check the result files, and
# tear everything down again, also on failure or Ctrl-C.
#
# A shell script, not Python: every step is a docker / docker-compose / flwr command, and the
# script is exactly the sequence a person would type (the README quotes it); `trap` gives the
# teardown on any exit.
#
# Needs root (apt-get, dockerd). Installs docker.io, debootstrap and docker-compose when missing.
# Starts its own dockerd (no bridge, no firewall rules) unless one already answers, and stops it
# by its PID at the end. The base image is a debootstrapped Debian bookworm imported as
# fedcgd-base:bookworm (no registry needed); the host's CA bundle goes into the build so pip
# trusts a TLS-intercepting proxy. Work folder: build/compose/ (git-ignored).
#
# Environment: PY (python with the project installed, default .venv/bin/python),
# FEDCGD_BASE_IMAGE (skip debootstrap: use this base), CA_BUNDLE_SRC (default: the system bundle),
# RUN_TIMEOUT_S (flwr run limit, default 900).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WORK=build/compose
PY="${PY:-.venv/bin/python}"
BIN="$(dirname "$PY")"
FEDCGD="$BIN/fedcgd"
BASE_IMAGE="${FEDCGD_BASE_IMAGE:-fedcgd-base:bookworm}"
CA_BUNDLE_SRC="${CA_BUNDLE_SRC:-/etc/ssl/certs/ca-certificates.crt}"
RUN_TIMEOUT_S="${RUN_TIMEOUT_S:-900}"
SUPERLINK_PORT=18700             # docker-compose.test.yml; SuperNode i: 1871i
SUPERNODE_PORTS=(18710 18711 18712 18713)
ROGUE_PORT=18714                 # a SuperNode whose key is never registered
CONNECTION=compose-test
RESULT_NAME=fscd-digits
# docker-compose.yml with docker-compose.test.yml on top, resolved (see step 6).
RESOLVED="$WORK/docker-compose.resolved.yml"
COMPOSE=(docker-compose -p fedcgd-test -f "$RESOLVED")
START=$SECONDS
DOCKERD_PID=""
COMPOSE_STARTED=0

log() { printf '[test-compose %4ds] %s\n' "$((SECONDS - START))" "$*"; }

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    set +e
    if ((COMPOSE_STARTED)); then
        "${COMPOSE[@]}" logs --no-color >"$WORK/compose.log" 2>&1
        log "docker-compose down (container logs: $WORK/compose.log)"
        "${COMPOSE[@]}" down --remove-orphans >>"$WORK/compose-down.log" 2>&1
    fi
    if [[ -n "$DOCKERD_PID" ]]; then
        log "stopping dockerd (PID $DOCKERD_PID)"
        kill "$DOCKERD_PID" 2>/dev/null
        for _ in $(seq 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
        if kill -0 "$DOCKERD_PID" 2>/dev/null; then
            log "dockerd still running after 30 s: SIGKILL"
            kill -KILL "$DOCKERD_PID" 2>/dev/null
        fi
        wait "$DOCKERD_PID" 2>/dev/null
    fi
    if ((rc == 0)); then
        log "PASSED in $((SECONDS - START)) s"
    else
        log "FAILED (exit $rc) after $((SECONDS - START)) s"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() { log "ERROR: $*"; exit 1; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# 1. Tools (Debian packages: docker.io, debootstrap, docker-compose v1).
missing=()
for tool in dockerd docker debootstrap docker-compose; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
    [[ $EUID -eq 0 ]] || fail "missing ${missing[*]}; run as root to install them with apt-get"
    log "installing docker.io debootstrap docker-compose (missing: ${missing[*]})"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q docker.io debootstrap docker-compose
fi
[[ -x "$PY" ]] || fail "$PY not found: run make test-compose (it installs the project first)"
for port in "$SUPERLINK_PORT" "${SUPERNODE_PORTS[@]}" "$ROGUE_PORT"; do
    port_free "$port" || fail "port 127.0.0.1:$port is in use"
done
mkdir -p "$WORK"

# 2. Docker daemon: no bridge, no iptables rules, no masquerading (loopback/host network only).
if docker info >/dev/null 2>&1; then
    log "using the Docker daemon that is already running (left running)"
else
    log "starting dockerd --bridge=none --iptables=false --ip-masq=false (log: $WORK/dockerd.log)"
    dockerd --bridge=none --iptables=false --ip-masq=false >"$WORK/dockerd.log" 2>&1 &
    DOCKERD_PID=$!
    for _ in $(seq 120); do
        docker info >/dev/null 2>&1 && break
        kill -0 "$DOCKERD_PID" 2>/dev/null || fail "dockerd exited; see $WORK/dockerd.log"
        sleep 0.5
    done
    docker info >/dev/null 2>&1 || fail "dockerd did not answer within 60 s"
fi

# 3. Base image without a registry: Debian bookworm minbase, imported.
if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    [[ "$BASE_IMAGE" == fedcgd-base:bookworm ]] || fail "base image $BASE_IMAGE not found"
    log "debootstrap bookworm minbase -> $WORK/rootfs"
    rm -rf "$WORK/rootfs"
    debootstrap --variant=minbase bookworm "$WORK/rootfs" http://deb.debian.org/debian \
        >"$WORK/debootstrap.log" 2>&1 || fail "debootstrap failed; see $WORK/debootstrap.log"
    log "docker import -> $BASE_IMAGE"
    tar -C "$WORK/rootfs" -c . | docker import - "$BASE_IMAGE" >/dev/null
    rm -rf "$WORK/rootfs"
fi

# 4. The app image, on the host's network, trusting the host's CA bundle for pip.
build_args=(--build-arg "BASE_IMAGE=$BASE_IMAGE")
if [[ -f "$CA_BUNDLE_SRC" ]]; then
    cp "$CA_BUNDLE_SRC" "$WORK/ca-bundle.crt"
    build_args+=(--build-arg "CA_BUNDLE=$WORK/ca-bundle.crt")
fi
log "docker build --network host -t fedcgd:latest ${build_args[*]} . (log: $WORK/build.log)"
docker build --network host -t fedcgd:latest "${build_args[@]}" . >"$WORK/build.log" 2>&1 \
    || { tail -n 30 "$WORK/build.log"; fail "docker build failed; see $WORK/build.log"; }
# Superseded builds of this image (untagged, labelled by the Dockerfile) only hold disk space.
docker image prune -f --filter label=org.opencontainers.image.title=fedcgd >/dev/null

# 5. Certificates, an empty results folder owned by this user, a flwr connection with TLS.
rm -rf "$WORK/certificates" "$WORK/results" "$WORK/flwr-home"
# Five key pairs: 0-3 for the SuperNodes, 4 for a SuperNode that must be turned away.
"$FEDCGD" certificates --out "$WORK/certificates" --supernodes 5
mkdir -p "$WORK/results" "$WORK/flwr-home"
export FEDCGD_UID FEDCGD_GID
FEDCGD_UID="$(id -u)"
FEDCGD_GID="$(id -g)"
export FLWR_HOME="$ROOT/$WORK/flwr-home"
cat >"$FLWR_HOME/config.toml" <<EOF
[superlink]
default = "$CONNECTION"

[superlink.$CONNECTION]
address = "127.0.0.1:$SUPERLINK_PORT"
root-certificates = "$ROOT/$WORK/certificates/ca.crt"
EOF

# 6. The public compose file with the test override on top. Docker (docker-py in Compose v1)
# refuses published ports on host networking, and a Compose v1 override cannot unset a key, so
# the merged file is resolved with `docker-compose config` and its `ports:` dropped.
docker-compose -f docker-compose.yml -f docker-compose.test.yml config >"$RESOLVED.tmp"
"$PY" - "$RESOLVED.tmp" "$RESOLVED" <<'PYEOF'
import sys

import yaml

compose = yaml.safe_load(open(sys.argv[1]))
for service in compose["services"].values():
    assert service.get("network_mode") == "host", service
    service.pop("ports", None)
yaml.safe_dump(compose, open(sys.argv[2], "w"), sort_keys=False)
PYEOF
rm -f "$RESOLVED.tmp"

# 7. SuperLink (TLS, SuperNode authentication), then the SuperNodes' keys, then the SuperNodes.
COMPOSE_STARTED=1
log "docker-compose up -d superlink"
"${COMPOSE[@]}" up -d --no-build superlink
registered=0
for i in 0 1 2 3; do
    for _ in $(seq 60); do
        if "$BIN/flwr" supernode register "$WORK/certificates/supernode-$i.pub" "$CONNECTION" \
            >"$WORK/register-$i.log" 2>&1; then
            registered=$((registered + 1))
            break
        fi
        sleep 1
    done
done
((registered == 4)) || { cat "$WORK"/register-*.log; fail "registered $registered of 4 keys"; }
log "registered 4 SuperNode keys"
# Authentication holds: the same SuperNode command with an unregistered key is turned away
# (Flower logs exit code 305; the process exits with status 1).
rogue_rc=0
timeout 120 docker run --rm --network host -v "$ROOT/$WORK/certificates:/certificates:ro" \
    fedcgd:latest flower-supernode --root-certificates /certificates/ca.crt \
    --auth-supernode-private-key /certificates/supernode-4.key --superlink "127.0.0.1:$SUPERLINK_PORT" \
    --host 127.0.0.1 --port "$ROGUE_PORT" --node-config "partition-id=0 num-partitions=4" \
    >"$WORK/unregistered-supernode.log" 2>&1 || rogue_rc=$?
if ((rogue_rc == 0 || rogue_rc == 124)) || ! grep -q "Exit Code: 305" "$WORK/unregistered-supernode.log"; then
    fail "a SuperNode with an unregistered key was not refused with 305 (exit $rogue_rc; see $WORK/unregistered-supernode.log)"
fi
log "a SuperNode with an unregistered key was refused (exit 305); docker-compose up -d (4 SuperNodes)"
"${COMPOSE[@]}" up -d --no-build
# Nothing but the host network: no bridge network may exist.
networks="$(docker network ls --format '{{.Driver}}' | sort -u | tr '\n' ' ')"
[[ "$networks" == "host null " ]] || fail "unexpected Docker networks: $networks"

# 8. Two rounds over TLS from the host.
log "flwr run . $CONNECTION --stream (log: $WORK/flwr-run.log)"
timeout "$RUN_TIMEOUT_S" "$BIN/flwr" run . "$CONNECTION" --stream \
    --run-config "num-devices=4 num-server-rounds=2 result-dir='/results/$RESULT_NAME'" \
    2>&1 | tee "$WORK/flwr-run.log" || fail "flwr run failed or timed out"

# 9. The ServerApp's files, readable here.
out="$WORK/results/$RESULT_NAME"
for f in config.json metrics.jsonl model.pt summary.json; do
    [[ -s "$out/$f" && -r "$out/$f" ]] || fail "missing or unreadable: $out/$f"
done
lines="$(wc -l <"$out/metrics.jsonl")"
((lines == 2)) || fail "$out/metrics.jsonl has $lines lines, not 2"
owner="$(stat -c %u "$out/summary.json")"
((owner == FEDCGD_UID)) || fail "$out/summary.json belongs to UID $owner, not $FEDCGD_UID"
log "result files OK in $out: $(ls "$out" | tr '\n' ' ')"
