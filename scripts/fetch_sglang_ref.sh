#!/usr/bin/env bash
# One ref of an SGLang repository into a folder: scripts/fetch_sglang_ref.sh REPO REF DEST.
# A shallow fetch of that ref only (a branch, a tag, a commit, or pull/N/head for a pull request),
# checked out detached; prints the commit. `make sglang-install SGLANG_REF=...` uses it on a GPU
# (scripts/install_sglang_gpu.sh) and on a CPU alike.
set -euo pipefail
if [ "$#" -ne 3 ] || [ -z "$1" ] || [ -z "$2" ] || [ -z "$3" ]; then
  echo "fetch_sglang_ref.sh: usage: fetch_sglang_ref.sh REPO REF DEST" >&2
  exit 2
fi
repo="$1" ref="$2" dest="$3"
rm -rf "$dest"
git init -q "$dest"
if ! git -C "$dest" fetch -q --depth 1 "$repo" "$ref"; then
  echo "fetch_sglang_ref.sh: cannot fetch ref $ref of $repo" >&2
  exit 2
fi
git -C "$dest" checkout -q --detach FETCH_HEAD
echo "sglang-install: $repo at $ref: commit $(git -C "$dest" rev-parse HEAD)"
