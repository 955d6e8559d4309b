#!/usr/bin/env bash
# Builds the container images of the compose cluster fully offline: nothing
# is pulled from an image registry, only Go modules are fetched (from the Go
# module proxy, or the module cache).
#
#   scripts/images.sh                  # binaries, then the three images
#   scripts/images.sh --binaries-only  # binaries only, no docker
#
# Binaries (static: CGO_ENABLED=0, -trimpath, -s -w, linux) go to
# .artifacts/images/bin:
#   chio         ./cmd/chio
#   nats-server  github.com/nats-io/nats-server/v2 at the version go.mod pins
#   caddy        the deploy/caddy module (standard Caddy v2)
# Images (FROM scratch, deploy/*.Dockerfile, legacy builder), each built from
# a context staged under .artifacts/images/context/<name>:
#   chio-ledger/chio:dev  chio-ledger/nats:dev  chio-ledger/caddy:dev
#
# The builds are reproducible, so an unchanged binary hits the docker build
# cache and its image keeps its id (reported as "unchanged"). An image that
# was rebuilt has its previous, now untagged, version removed when nothing
# else uses it.
#
# Environment: GOARCH (default: the Go toolchain's), DOCKER (default: docker).
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }

binaries_only=0
for arg in "$@"; do
  case $arg in
    --binaries-only) binaries_only=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "images.sh: unknown argument: $arg (try --help)" >&2; exit 2 ;;
  esac
done

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$repo/.artifacts/images
bin=$out/bin
docker=${DOCKER:-docker}

export CGO_ENABLED=0 GOOS=linux GOWORK=off
GOARCH=${GOARCH:-$(go env GOARCH)}
export GOARCH
# -buildvcs=false: the binaries must not change with the state of the git
# work tree, or every build would be a new image.
gobuild=(go build -trimpath -buildvcs=false -ldflags='-s -w')

step() { printf '==> %s\n' "$*"; }
elapsed() { printf '    (%ds)\n' "$((SECONDS - $1))"; }

mkdir -p "$bin"

t=$SECONDS
step "chio (./cmd/chio)"
(cd "$repo" && "${gobuild[@]}" -o "$bin/chio" ./cmd/chio)
elapsed "$t"

t=$SECONDS
step "nats-server ($(cd "$repo" && go list -m -f '{{.Path}} {{.Version}}' github.com/nats-io/nats-server/v2))"
(cd "$repo" && "${gobuild[@]}" -o "$bin/nats-server" github.com/nats-io/nats-server/v2)
elapsed "$t"

t=$SECONDS
step "caddy ($(cd "$repo/deploy/caddy" && go list -m -f '{{.Path}} {{.Version}}' github.com/caddyserver/caddy/v2))"
(cd "$repo/deploy/caddy" && "${gobuild[@]}" -o "$bin/caddy" .)
elapsed "$t"

ls -l "$bin"
if [ "$binaries_only" = 1 ]; then
  exit 0
fi

if ! "$docker" info >/dev/null 2>&1; then
  echo "images.sh: cannot reach the docker engine ('$docker info' fails); use --binaries-only for the binaries alone" >&2
  exit 1
fi

# stage NAME DOCKERFILE FILE...: a fresh build context holding the Dockerfile,
# the files (binaries hard-linked when possible) and "dirs", a tree of the
# empty directories a FROM scratch image needs (it has no shell to mkdir):
# /data and /tmp, mode 1777 so that any --user can write them. (COPY keeps
# the mode of the directories inside its source, not of the source itself.)
stage() {
  local name=$1 dockerfile=$2 ctx=$out/context/$1 f
  shift 2
  rm -rf "$ctx"
  mkdir -p "$ctx/dirs/data" "$ctx/dirs/tmp"
  chmod 1777 "$ctx/dirs/data" "$ctx/dirs/tmp"
  cp "$dockerfile" "$ctx/Dockerfile"
  for f in "$@"; do
    if [ -d "$f" ]; then
      cp -R "$f" "$ctx/"
    else
      ln -f "$f" "$ctx/" 2>/dev/null || cp "$f" "$ctx/"
    fi
  done
}

image_id() { "$docker" image inspect -f '{{.Id}}' "$1" 2>/dev/null || true; }

# build NAME TAG: docker build of the staged context with the legacy builder
# (no BuildKit: the engine may predate it, and nothing here needs it).
build() {
  local name=$1 tag=$2 before after t=$SECONDS
  step "image $tag"
  before=$(image_id "$tag")
  DOCKER_BUILDKIT=0 "$docker" build --pull=false -t "$tag" "$out/context/$name"
  after=$(image_id "$tag")
  if [ -z "$before" ]; then
    echo "    $tag: new"
  elif [ "$before" = "$after" ]; then
    echo "    $tag: unchanged"
  else
    echo "    $tag: rebuilt"
    "$docker" image rm "$before" >/dev/null 2>&1 || true
  fi
  elapsed "$t"
}

stage chio "$repo/deploy/chio.Dockerfile" "$bin/chio"
stage nats "$repo/deploy/nats.Dockerfile" "$bin/nats-server" "$repo/deploy/nats"
stage caddy "$repo/deploy/caddy.Dockerfile" "$bin/caddy" "$repo/deploy/caddy/Caddyfile"

build chio chio-ledger/chio:dev
build nats chio-ledger/nats:dev
build caddy chio-ledger/caddy:dev

echo
for tag in chio-ledger/chio:dev chio-ledger/nats:dev chio-ledger/caddy:dev; do
  "$docker" image ls --no-trunc --format '{{.Repository}}:{{.Tag}}  {{.ID}}  {{.Size}}' "$tag"
done
