#!/usr/bin/env bash
# Fetches a real English corpus from the distribution's packages: the Linux kernel documentation (the .rst
# sources shipped by Debian's linux-doc-<version>), excluding translations: one file per document under
# <out-dir>/rst/ (for `primer tokenize`, one document each) and all of them concatenated in path order into one
# UTF-8 text file (for the byte-level recipes). Used by recipes/examples/*linux_doc*.yaml.
# Usage: tools/fetch-linux-doc.sh [out-dir]   (default: data-cache/linux-doc) → <out-dir>/{linux-doc.txt,rst/}
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-data-cache/linux-doc}"
if [ -s "$out/linux-doc.txt" ] && [ -d "$out/rst" ]; then
  echo "fetch-linux-doc: $out/linux-doc.txt and $out/rst exist ($(wc -c <"$out/linux-doc.txt") bytes)"
  exit 0
fi
mkdir -p "$out"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# linux-doc is a metapackage; its dependency names the versioned package that holds the files.
pkg="$(apt-cache depends linux-doc 2>/dev/null | awk '/Depends: linux-doc-/{print $2; exit}')"
if [ -z "$pkg" ]; then
  [ "$(id -u)" -eq 0 ] && apt-get update -qq
  pkg="$(apt-cache depends linux-doc | awk '/Depends: linux-doc-/{print $2; exit}')"
fi
[ -n "$pkg" ] || { echo "fetch-linux-doc: no linux-doc package known to apt" >&2; exit 1; }
echo "fetch-linux-doc: downloading $pkg"
(cd "$work" && apt-get download "$pkg" 2>&1 | grep -v "unsandboxed" || true)
deb="$(ls "$work"/*.deb)"
dpkg -x "$deb" "$work/x"
docs="$(find "$work/x/usr/share/doc" -maxdepth 2 -type d -name Documentation | head -1)"
find "$docs" -name '*.rst.gz' -not -path '*/translations/*' | LC_ALL=C sort | while read -r f; do
  rel="${f#"$docs"/}"
  rel="${rel%.gz}"
  mkdir -p "$work/rst/$(dirname "$rel")"
  zcat "$f" >"$work/rst/$rel"
  cat "$work/rst/$rel"
  printf '\n'
done >"$work/linux-doc.txt"
rm -rf "$out/rst"
mv "$work/rst" "$out/rst"
mv "$work/linux-doc.txt" "$out/linux-doc.txt"
echo "fetch-linux-doc: $out/linux-doc.txt ($(wc -c <"$out/linux-doc.txt") bytes from $pkg) and $(find "$out/rst" -type f | wc -l) files in $out/rst"
