#!/usr/bin/env bash
# Build the wheelhouse the prefetch image is made from (bundle file: prefetchImage.wheels):
# sealift's own wheel from this checkout and a wheel of every dependency for one platform and
# Python, at the versions the venv was tested with. Needs the network when cold; a no-op when
# nothing changed (the sources, the pins, the platform, the Python, the extras).
#
#   tools/wheelhouse.sh [PLATFORM [PYTHON]]     default: linux/amd64 3.11
#
#   WHEELHOUSE_DIR     where (default .cache/wheelhouse-<os>-<arch>-py<PYTHON>)
#   WHEELHOUSE_EXTRAS  sealift extras to include, e.g. sigstore (keyless trust policies)
#   WHEELHOUSE_GLIBC   the newest glibc a wheel may need (default 2.28, as prefetchImage.glibc)
#   PYTHON_BIN         the Python with sealift installed (default .venv/bin/python)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PLATFORM=${1:-linux/amd64}
PYVER=${2:-3.11}
PY=${PYTHON_BIN:-$ROOT/.venv/bin/python}
EXTRAS=${WHEELHOUSE_EXTRAS:-}
GLIBC=${WHEELHOUSE_GLIBC:-2.28}
OUT=${WHEELHOUSE_DIR:-$ROOT/.cache/wheelhouse-${PLATFORM//\//-}-py$PYVER}
started=$(date +%s%N)

# One list of platform tags, the one bundle create installs with.
TAGS=$("$PY" -c 'import sys
from sealift.bundles.prefetch_image import pip_platform_tags
print(" ".join(pip_platform_tags(sys.argv[1], sys.argv[2])))' "$PLATFORM" "$GLIBC")
VERSION=$("$PY" -c 'from sealift import __version__; print(__version__)')

# What sealift's wheel is built from, and what decides the dependency set.
SOURCES=(pyproject.toml README.md sealift bundles signing installer prefetch)
src_key=$(cd "$ROOT" && find "${SOURCES[@]}" -type f \( -name '*.py' -o -name '*.json' -o -name '*.toml' -o -name '*.md' \) \
  -not -path '*/__pycache__/*' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
constraints=$("$PY" -m pip freeze --exclude-editable --disable-pip-version-check 2>/dev/null | grep -v -i -e '^sealift' -e ' @ ' || true)
deps_key=$(printf '%s\n' "$PLATFORM" "$PYVER" "$GLIBC" "$EXTRAS" "$TAGS" "$constraints" \
  "$(cat "$ROOT/pyproject.toml")" | sha256sum | cut -c1-16)

if [[ -f $OUT/.src-key && -f $OUT/.deps-key && $(<"$OUT/.src-key") == "$src_key" && $(<"$OUT/.deps-key") == "$deps_key" ]]; then
  echo "wheelhouse cached: $OUT ($(ls "$OUT"/*.whl | wc -l) wheels, $(du -sh "$OUT" | cut -f1))"
  exit 0
fi

mkdir -p "$(dirname "$OUT")"
NEW=$(mktemp -d "$OUT.new.XXXXXX")
SCRATCH=$(mktemp -d)
trap 'rm -rf "$NEW" "$SCRATCH"' EXIT
deps_cached=false
if [[ -f $OUT/.deps-key && $(<"$OUT/.deps-key") == "$deps_key" ]]; then
  deps_cached=true
  find "$OUT" -maxdepth 1 -name '*.whl' -not -name 'sealift-*' -exec ln {} "$NEW/" \;
fi

# sealift's wheel, from a copy of the sources (a build/ folder in the checkout could carry
# deleted modules into the wheel). Offline when a Python with setuptools and wheel is at hand,
# else pip fetches them into an isolated build environment.
if [[ -f $OUT/.src-key && $(<"$OUT/.src-key") == "$src_key" ]] && compgen -G "$OUT/sealift-$VERSION-*.whl" >/dev/null; then
  ln "$OUT"/sealift-"$VERSION"-*.whl "$NEW/"
else
  (cd "$ROOT" && cp -r --parents "${SOURCES[@]}" "$SCRATCH/")
  find "$SCRATCH" -name __pycache__ -prune -exec rm -rf {} +
  builder=()
  for candidate in "$PY" /usr/bin/python3; do
    if [[ -x $candidate ]] && "$candidate" -c 'import setuptools.build_meta, wheel' 2>/dev/null; then
      builder=("$candidate" -m pip wheel --no-build-isolation); break
    fi
  done
  [[ ${#builder[@]} -gt 0 ]] || builder=("$PY" -m pip wheel)
  "${builder[@]}" --quiet --no-deps --disable-pip-version-check -w "$NEW" "$SCRATCH"
fi
WHEEL=$(compgen -G "$NEW/sealift-$VERSION-*.whl" | head -1)
[[ -n $WHEEL ]] || { echo "wheelhouse: no sealift $VERSION wheel was built" >&2; exit 1; }

# Every dependency, resolved from sealift's own wheel metadata, for the target: binary wheels
# only, pinned to what the venv tested (a constraint only applies to what is needed).
if ! $deps_cached; then
  printf '%s\n' "$constraints" > "$SCRATCH/constraints.txt"
  platform_args=()
  for tag in $TAGS; do platform_args+=(--platform "$tag"); done
  "$PY" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
    --implementation cp --python-version "$PYVER" "${platform_args[@]}" \
    -c "$SCRATCH/constraints.txt" -d "$NEW" "$WHEEL${EXTRAS:+[$EXTRAS]}"
fi

echo "$src_key" > "$NEW/.src-key"
echo "$deps_key" > "$NEW/.deps-key"
rm -rf "$OUT"
mv "$NEW" "$OUT"
trap 'rm -rf "$SCRATCH"' EXIT
elapsed_ms=$(( ($(date +%s%N) - started) / 1000000 ))
echo "wheelhouse built: $OUT ($(ls "$OUT"/*.whl | wc -l) wheels, $(du -sh "$OUT" | cut -f1)) in ${elapsed_ms}ms"
