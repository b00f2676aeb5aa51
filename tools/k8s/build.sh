#!/usr/bin/env bash
# Build the test cluster's binaries into $K8S_BIN (default .cache/k8s/bin); no-op when the stamp matches.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
K8S_CACHE=${K8S_CACHE:-$(cd "$HERE/../.." && pwd)/.cache/k8s}
K8S_BIN=$K8S_CACHE/bin
KV=$(awk '$1=="k8s.io/kubernetes"{print $2} $1=="require" && $2=="k8s.io/kubernetes"{print $3}' "$HERE/go.mod")
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
STAMP="k8s=$KV kwok=$KWOK_VERSION go=$(go env GOVERSION) sum=$(sha256sum "$HERE/go.sum" | cut -c1-16)"
if [[ -f $K8S_BIN/.stamp && $(cat "$K8S_BIN/.stamp") == "$STAMP" ]]; then echo "k8s tools cached: $STAMP"; exit 0; fi
export GOPATH=$K8S_CACHE/gopath GOMODCACHE=$K8S_CACHE/gopath/pkg/mod GOCACHE=$K8S_CACHE/gocache GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
mkdir -p "$K8S_BIN"; rm -f "$K8S_BIN/.stamp"
MAJ=${KV#v}; MAJ=${MAJ%%.*}; MIN=${KV#v*.}; MIN=${MIN%%.*}
LD="-s -w"
for k in gitVersion=$KV gitMajor=$MAJ gitMinor=$MIN gitTreeState=clean gitCommit=0000000000000000000000000000000000000000 buildDate=1970-01-01T00:00:00Z; do
  LD="$LD -X k8s.io/component-base/version.$k -X k8s.io/client-go/pkg/version.$k"
done
cd "$HERE"
t=$(date +%s)
go build -trimpath -ldflags "$LD" -o "$K8S_BIN/" k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
echo "TIMING k8s $(( $(date +%s)-t ))s"; t=$(date +%s)
go build -trimpath -ldflags "-s -w" -o "$K8S_BIN/etcd" go.etcd.io/etcd/server/v3
echo "TIMING etcd $(( $(date +%s)-t ))s"; t=$(date +%s)
( cd / && GOFLAGS= GOBIN=$K8S_BIN go install -trimpath -ldflags "-s -w" sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION )
echo "TIMING kwok $(( $(date +%s)-t ))s"
echo "$STAMP" > "$K8S_BIN/.stamp"
