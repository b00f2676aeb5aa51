#!/usr/bin/env bash
# Generate a wrapper go.mod that builds k8s.io/kubernetes commands from the Go module proxy.
# Usage: gen-gomod.sh v1.37.2   (run in the wrapper dir; needs GOMODCACHE/GOPROXY set)
set -euo pipefail
KV=${1:?kubernetes version, e.g. v1.37.2}
SV=v0.${KV#v1.}                       # v1.37.2 -> v0.37.2 (staging modules)
KMOD=$(go mod download -json "k8s.io/kubernetes@$KV" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
GOLINE=$(awk '$1=="go"{print $2; exit}' "$KMOD")
{
  echo "module sealift.local/k8s-tools"
  echo
  echo "go $GOLINE"
  echo
  echo "godebug default=go${GOLINE%.*}"
  echo
  echo "require k8s.io/kubernetes $KV"
  echo
  echo "replace ("
  # every staging module that kubernetes replaces with ./staging/src/... -> its published v0.x.y
  awk '/^replace \(/{f=1;next} f&&/^\)/{f=0} f&&$3 ~ /^\.\/staging\//{print $1}' "$KMOD" |
    grep -v '^k8s.io/sample-' | while read -r m; do echo "	$m => $m $SV"; done
  echo ")"
} > go.mod
