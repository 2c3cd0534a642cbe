#!/usr/bin/env bash
# The user guide's shape, as docs/README.md promises it: every relative link of README.md and of
# docs/ (the records included) names a file or folder that exists; the user pages (README.md,
# docs/*.md) carry no commit of this repository (those belong in docs/records/) and stay within
# MAX_LINES lines each (size is a symptom: a page past it is a page to split or cut).
#   docs_pages.sh SOURCE_DIR [MAX_LINES]
set -uo pipefail
src=$(cd "$1" && pwd)
max=${2:-400}
failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

# Links: [text](target) with a relative target; an anchor (#...) is cut, a bare anchor skipped.
while IFS= read -r -d '' md; do
  dir=$(dirname "$md")
  while IFS=: read -r line target; do
    target=${target%%#*}
    [ -n "$target" ] || continue
    case "$target" in
      http://* | https://* | mailto:*) continue ;;
    esac
    [ -e "$dir/$target" ] || fail "${md#"$src"/}:$line links to $target, which does not exist"
  done < <(grep -on '\](\([^)]*\))' "$md" | sed 's/^\([0-9]*\):](\(.*\))$/\1:\2/')
done < <(find "$src/README.md" "$src/docs" -name '*.md' -print0)

# Commit hashes and size, user pages only.
pages=("$src/README.md" "$src"/docs/*.md)
have_git=0
git -C "$src" rev-parse --git-dir > /dev/null 2>&1 && have_git=1
for md in "${pages[@]}"; do
  rel=${md#"$src"/}
  lines=$(wc -l < "$md")
  [ "$lines" -le "$max" ] || fail "$rel has $lines lines, more than $max: move history to docs/records/, or split it"
  [ "$have_git" -eq 1 ] || continue
  # Words of 7 to 40 hex digits with a digit and a letter in them, not after 0x.
  while IFS=: read -r line word; do
    if git -C "$src" rev-parse --verify -q "$word^{commit}" > /dev/null 2>&1; then
      fail "$rel:$line names commit $word: user pages carry no commit hashes (docs/records/ does)"
    fi
  done < <(grep -onE '(^|[^0-9A-Za-z_x])[0-9a-f]{7,40}([^0-9A-Za-z_]|$)' "$md" |
    sed -E 's/^([0-9]+):[^0-9a-f]?([0-9a-f]{7,40}).*$/\1:\2/' | grep -E ':.*[0-9]' | grep -E ':.*[a-f]')
done
[ "$have_git" -eq 1 ] || echo "note: no git history here; commit hashes not checked"
echo "${#pages[@]} user pages checked, $failures problems"
[ "$failures" -eq 0 ]
