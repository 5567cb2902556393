#!/bin/bash
# Build the two OCI images (bot, node agent) on this machine from the package registries only:
# a Debian root made by mmdebstrap (Debian packages: python3 and its runtime), the project's wheels
# built from this tree plus their dependencies' wheels from PyPI (pip), assembled with umoci.
#
#   sudo deploy/images/build.sh [OUT_DIR]        # default dist/images; needs root (mmdebstrap, umoci)
#   -> OUT_DIR/gpu-triage-<v>.oci.tar, OUT_DIR/node-agent-<v>.oci.tar (OCI archives)
#   podman load -i OUT_DIR/gpu-triage-<v>.oci.tar       # or: skopeo copy oci-archive:... docker://REGISTRY/...
#
# Packages on Debian 12: apt-get install mmdebstrap umoci (podman or skopeo to load/push). The
# Kubernetes manifests (deploy/k8s) name these images as ghcr.io/gpu-triage/{gpu-triage,node-agent}:<v>.
# Both run as uid 10001 by default (the agent's DaemonSet overrides it: see docs/kubernetes.md).
# tests/deploy/test_images.py (TRIAGE_IMAGE_TEST=1) builds them and runs both.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=$(mkdir -p "${1:-$root/dist/images}" && cd "${1:-$root/dist/images}" && pwd)
version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$root/node_agent/__init__.py")
suite=${DEBIAN_SUITE:-bookworm}          # its python3 is 3.11: the bot's requires-python
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
work=$(mktemp -d "${TMPDIR:-/tmp}/triage-images.XXXXXX")
trap 'rm -rf "$work"' EXIT
for tool in mmdebstrap umoci python3; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing (apt-get install mmdebstrap umoci)" >&2; exit 2; }
done
t0=$SECONDS

# 1. One Debian root for both: minbase (no apt sources kept) + python3, ca-certificates (TLS to
#    Slack), tzdata (log times).
mmdebstrap --variant=minbase --include=python3,ca-certificates,tzdata --quiet \
  --customize-hook='chroot "$1" useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent triage' \
  --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/usr/share/doc/* "$1"/usr/share/man/*' \
  "$suite" "$work/base.tar" "$mirror"
echo "build.sh: Debian $suite root in $((SECONDS - t0)) s"

# 2. The wheels: this tree's two distributions, and their dependencies from PyPI, for the root's
#    Python (3.11, manylinux x86-64 or aarch64), binary only: nothing is compiled in the image.
py_tag=$(tar -tf "$work/base.tar" | sed -n 's#^\./usr/bin/python3\.\([0-9]*\)$#3\1#p' | head -n 1)
[ -n "$py_tag" ] || { echo "build.sh: no python3.X in the Debian root" >&2; exit 1; }
"$root/.venv/bin/python" -V >/dev/null 2>&1 && builder="$root/.venv/bin/python" || builder=python3
# from a copy: an in-tree build reuses build/lib, where a module deleted since would live on
mkdir "$work/src" && cp -r "$root"/{bot,node_agent,signatures,pyproject.toml,setup.py,README.md,LICENSE,MANIFEST.in} "$work/src/"
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
"$builder" -m pip wheel --quiet --no-deps --wheel-dir "$work/wheels" "$work/src"
"$builder" "$root/deploy/agent/build.py" wheel --out "$work/wheels" >/dev/null
arch=$(uname -m)
install_into() {  # install_into ROOTFS REQUIREMENT...: pure files under /opt/gpu-triage, like a venv's site
  local dest=$1; shift
  "$builder" -m pip install --quiet --no-compile --target "$dest/opt/gpu-triage/lib" \
    --python-version "$py_tag" --implementation cp --abi "cp$py_tag" \
    --platform "manylinux2014_$arch" --platform "manylinux_2_17_$arch" --platform "manylinux_2_28_$arch" \
    --only-binary=:all: --find-links "$work/wheels" "$@"
}

# 3. Assemble: unpack the base into an OCI bundle, add /opt/gpu-triage, repack as one layer each.
image() {  # image NAME REQUIREMENT ENTRYPOINT_JSON_ARGS...
  local name=$1 req=$2; shift 2
  local layout="$work/$name-layout" tag="$version"
  umoci init --layout "$layout"
  umoci new --image "$layout:$tag"
  umoci unpack --image "$layout:$tag" "$work/$name-bundle" >/dev/null
  tar -xf "$work/base.tar" -C "$work/$name-bundle/rootfs"
  install_into "$work/$name-bundle/rootfs" "$req"
  umoci repack --image "$layout:$tag" "$work/$name-bundle"
  local args=()
  for a in "$@"; do args+=(--config.entrypoint "$a"); done
  umoci config --image "$layout:$tag" "${args[@]}" \
    --config.env PYTHONPATH=/opt/gpu-triage/lib --config.env PYTHONDONTWRITEBYTECODE=1 \
    --config.env PATH=/usr/local/bin:/usr/bin:/bin --config.user 10001:10001 --config.workingdir / \
    --author gpu-triage --config.label "org.opencontainers.image.version=$version" \
    --config.label "org.opencontainers.image.source=https://github.com/gpu-triage/gpu-triage" \
    --config.label "org.opencontainers.image.licenses=Apache-2.0"
  umoci gc --layout "$layout"
  tar -C "$layout" -cf "$out/$name-$version.oci.tar" .
  echo "build.sh: $out/$name-$version.oci.tar ($(du -h "$out/$name-$version.oci.tar" | cut -f1)) at $((SECONDS - t0)) s"
}
image gpu-triage "gpu-triage==$version" python3 -m bot
image node-agent "gpu-triage-agent==$version" python3 -m node_agent
