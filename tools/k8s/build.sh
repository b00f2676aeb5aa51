#!/usr/bin/env bash
# Build the test cluster's binaries into $K8S_BIN (default .cache/k8s/bin).
# $K8S_BIN/.stamp holds one line per component (what it was built from); a component whose
# line is there and whose binaries exist is skipped, so a warm run costs nothing and a version
# bump rebuilds only the component it touches.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
K8S_CACHE=${K8S_CACHE:-$(cd "$HERE/../.." && pwd)/.cache/k8s}
K8S_BIN=$K8S_CACHE/bin
STAMP=$K8S_BIN/.stamp
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
command -v go >/dev/null || { echo "build.sh: no 'go' on PATH; the k8s test tools need Go (see tools/k8s/README.md)" >&2; exit 1; }
KV=$(awk '$1=="k8s.io/kubernetes"{print $2} $1=="require" && $2=="k8s.io/kubernetes"{print $3}' "$HERE/go.mod")
EV=$(awk '$1=="go.etcd.io/etcd/server/v3" && $2 ~ /^v/ {print $2}' "$HERE/go.mod")
GOV=$(go env GOVERSION)
SUM=$(sha256sum "$HERE/go.sum" | cut -c1-16)

# name|stamp line|binaries
COMPONENTS=(
  "k8s|k8s=$KV go=$GOV sum=$SUM|kube-apiserver kube-controller-manager kube-scheduler kubectl"
  "etcd|etcd=$EV go=$GOV sum=$SUM|etcd"
  "kwok|kwok=$KWOK_VERSION go=$GOV|kwok kwokctl"
  "helm|helm=$HELM_VERSION go=$GOV|helm"
)

# True when component $1 (an entry of COMPONENTS) is built and stamped.
built() {
  local line=${1#*|} bins b
  bins=${line#*|}; line=${line%%|*}
  grep -qxF -- "$line" "$STAMP" 2>/dev/null || return 1
  for b in $bins; do [[ -x $K8S_BIN/$b ]] || return 1; done
}

# Names of the components still to build.
todo() {
  local c
  for c in "${COMPONENTS[@]}"; do built "$c" || echo "${c%%|*}"; done
}

# Replace component $1's stamp line with $2 (or just drop it when $2 is empty), atomically.
restamp() {
  local tmp=$STAMP.tmp.$$
  { grep -v -- "^$1=" "$STAMP" 2>/dev/null || true; [[ -z ${2:-} ]] || echo "$2"; } >"$tmp"
  mv -f "$tmp" "$STAMP"
}

# Stamps written before per-component lines (one line: k8s, etcd and kwok together).
legacy_stamp() {
  [[ -f $STAMP ]] && [[ $(cat "$STAMP") == "k8s=$KV kwok=$KWOK_VERSION go=$GOV sum=$SUM" ]] || return 0
  printf '%s\n' "k8s=$KV go=$GOV sum=$SUM" "etcd=$EV go=$GOV sum=$SUM" "kwok=$KWOK_VERSION go=$GOV" >"$STAMP"
}

legacy_stamp
if [[ -z $(todo) ]]; then echo "k8s tools cached: $(tr '\n' ' ' <"$STAMP")"; exit 0; fi

mkdir -p "$K8S_BIN"
exec 9>"$K8S_CACHE/.build.lock"
flock 9 # one build at a time (two `make test` on one checkout)
legacy_stamp
export GOPATH=$K8S_CACHE/gopath GOMODCACHE=$K8S_CACHE/gopath/pkg/mod GOCACHE=$K8S_CACHE/gocache GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
cd "$HERE"

build_k8s() {
  local maj=${KV#v} min=${KV#v*.} ld="-s -w" k
  maj=${maj%%.*}; min=${min%%.*}
  for k in gitVersion=$KV gitMajor=$maj gitMinor=$min gitTreeState=clean gitCommit=0000000000000000000000000000000000000000 buildDate=1970-01-01T00:00:00Z; do
    ld="$ld -X k8s.io/component-base/version.$k -X k8s.io/client-go/pkg/version.$k"
  done
  go build -trimpath -ldflags "$ld" -o "$K8S_BIN/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
}

build_etcd() {
  go build -trimpath -ldflags "-s -w" -o "$K8S_BIN/etcd" go.etcd.io/etcd/server/v3
}

build_kwok() {
  (cd / && GOFLAGS= GOBIN=$K8S_BIN go install -trimpath -ldflags "-s -w" sigs.k8s.io/kwok/cmd/kwok@"$KWOK_VERSION" sigs.k8s.io/kwok/cmd/kwokctl@"$KWOK_VERSION")
}

# helm's version comes from ldflags (the source says only "v3.22"); its built-in Kubernetes
# version (Capabilities.KubeVersion for `helm template`, deprecation lint) is derived from its
# client-go the way helm's Makefile does: client-go v0.37.x -> Kubernetes 1.37.
build_helm() {
  (
    cd /
    export GOFLAGS=
    local gomod cg maj min p=helm.sh/helm/v3
    gomod=$(go mod download -json "$p@$HELM_VERSION" | sed -n 's/^\s*"GoMod": "\(.*\)",*$/\1/p')
    cg=$(awk '$1=="k8s.io/client-go"{print $2; exit}' "$gomod")
    cg=${cg#v}; maj=$((${cg%%.*} + 1)); min=${cg#*.}; min=${min%%.*}
    GOBIN=$K8S_BIN go install -trimpath -ldflags "-s -w \
      -X $p/internal/version.version=$HELM_VERSION \
      -X $p/internal/version.gitTreeState=clean \
      -X $p/pkg/lint/rules.k8sVersionMajor=$maj -X $p/pkg/lint/rules.k8sVersionMinor=$min \
      -X $p/pkg/chartutil.k8sVersionMajor=$maj -X $p/pkg/chartutil.k8sVersionMinor=$min" \
      "$p/cmd/helm@$HELM_VERSION"
  )
}

for c in "${COMPONENTS[@]}"; do
  built "$c" && continue
  name=${c%%|*}; line=${c#*|}; line=${line%%|*}
  restamp "$name"
  t=$(date +%s)
  "build_$name"
  echo "TIMING $name $(($(date +%s) - t))s"
  restamp "$name" "$line"
done
echo "k8s tools built: $(tr '\n' ' ' <"$STAMP")"
