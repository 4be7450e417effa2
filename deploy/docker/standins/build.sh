#!/usr/bin/env bash
# Builds local STAND-INS for the four upstream images docker-compose.yml and the Dockerfile use,
# tagged with exactly the upstream names, for a machine that reaches no image registry (the
# project's own machines reach Debian's packages, the Go module proxy and npm, nothing else).
# With them `docker compose up -d --build` runs the files unchanged. They are not the upstream
# images and are not meant for anything but running the compose cluster here:
#
#   golang:1.26                                     Debian bookworm + this machine's Go (GOROOT),
#                                                   + the project's modules as a file proxy
#                                                   (GOPROXY=file://, no network in `go mod download`)
#   gcr.io/distroless/static-debian13:nonroot       scratch + CA certificates + passwd/group with
#                                                   nonroot (65532), as distroless has
#   mcr.microsoft.com/azure-storage/azurite:3.37.0  Debian + this machine's node + Azurite/node_modules
#                                                   (the pinned azurite), azurite-blob/-queue on PATH
#   nats:2.15.2-alpine                              Debian (it has wget, for the health check) +
#                                                   nats-server built from the pinned module in go.mod
#
# Needs: a Docker daemon, debootstrap (apt-get install debootstrap), Go, node, and
# Azurite/node_modules (npm ci --prefix Azurite). Run as root (debootstrap). An image already
# present is kept; FORCE=1 rebuilds them all. The tags are read from docker-compose.yml and the
# Dockerfile, so a bump there is followed here.
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
base=local/debian:bookworm
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

have() { [ "${FORCE:-0}" != 1 ] && docker image inspect "$1" >/dev/null 2>&1; }
die() { echo "standins: $*" >&2; exit 1; }

go_tag="golang:$(sed -n 's/^ARG GO_VERSION=//p' "$root/Dockerfile")"
static_tag=$(sed -n 's/^FROM \(gcr.io\/distroless[^ ]*\).*/\1/p' "$root/Dockerfile")
azurite_tag=$(sed -n 's/^ *image: \(mcr.microsoft.com\/azure-storage\/azurite:.*\)$/\1/p' "$root/docker-compose.yml" | head -1)
nats_tag=$(sed -n 's/^ *image: \(nats:.*\)$/\1/p' "$root/docker-compose.yml" | head -1)
for t in "$go_tag" "$static_tag" "$azurite_tag" "$nats_tag"; do
  [[ -n $t && $t == *:* ]] || die "could not read an image tag from the Dockerfile/docker-compose.yml (got '$t')"
done
docker info >/dev/null 2>&1 || die "no Docker daemon answers (apt-get install docker.io; dockerd &)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! have "$base"; then
  command -v debootstrap >/dev/null || die "debootstrap missing: apt-get install debootstrap"
  echo "standins: debootstrap bookworm (a few minutes)"
  debootstrap --variant=minbase --include=wget,ca-certificates,libstdc++6 bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; die "debootstrap failed"; }
  tar -C "$work/rootfs" -c . | docker import - "$base" >/dev/null
  rm -rf "$work/rootfs"
fi

build() { # tag dir
  echo "standins: $1"
  docker build -q -t "$1" "$2" >/dev/null
}

if ! have "$go_tag"; then
  d=$work/golang
  mkdir -p "$d"
  cp -a "$(go env GOROOT)" "$d/go"
  # Every module the build needs, laid out as a GOPROXY folder, from this machine's cache.
  (cd "$root" && GOMODCACHE=$d/mod GOPROXY="file://$(go env GOMODCACHE)/cache/download,$(go env GOPROXY)" GOFLAGS=-mod=mod go mod download)
  mv "$d/mod/cache/download" "$d/proxy"
  chmod -R u+w "$d/mod" && rm -rf "$d/mod"
  cat >"$d/Dockerfile" <<EOF
FROM $base
COPY go /usr/local/go
COPY proxy /gomodproxy
ENV PATH=/usr/local/go/bin:/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin GOPATH=/go \
    GOPROXY=file:///gomodproxy GOSUMDB=off GOTOOLCHAIN=local
EOF
  build "$go_tag" "$d"
fi

if ! have "$static_tag"; then
  d=$work/static
  mkdir -p "$d/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "$d/etc/ssl/certs/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$d/etc/passwd"
  printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$d/etc/group"
  mkdir -p "$d/home/nonroot" "$d/tmp"
  cat >"$d/Dockerfile" <<'EOF'
FROM scratch
COPY etc /etc
COPY --chown=65532:65532 home /home
COPY tmp /tmp
USER 65532:65532
WORKDIR /home/nonroot
EOF
  build "$static_tag" "$d"
fi

if ! have "$azurite_tag"; then
  [ -x "$root/Azurite/node_modules/.bin/azurite-blob" ] || die "Azurite/node_modules missing: npm ci --prefix $root/Azurite"
  d=$work/azurite
  mkdir -p "$d/opt/azurite"
  cp "$(command -v node)" "$d/node"
  cp -a "$root/Azurite/node_modules" "$d/opt/azurite/node_modules"
  cat >"$d/Dockerfile" <<EOF
FROM $base
COPY node /usr/local/bin/node
COPY opt /opt
RUN for c in azurite azurite-blob azurite-queue azurite-table; do ln -s /opt/azurite/node_modules/.bin/\$c /usr/local/bin/\$c; done
WORKDIR /opt/azurite
EOF
  build "$azurite_tag" "$d"
fi

if ! have "$nats_tag"; then
  d=$work/nats
  mkdir -p "$d"
  (cd "$root" && CGO_ENABLED=0 go build -o "$d/nats-server" github.com/nats-io/nats-server/v2)
  cat >"$d/Dockerfile" <<EOF
FROM $base
COPY nats-server /usr/local/bin/nats-server
EXPOSE 4222 8222
CMD ["nats-server", "--jetstream"]
EOF
  build "$nats_tag" "$d"
fi
echo "standins: ready: $go_tag $static_tag $azurite_tag $nats_tag"
