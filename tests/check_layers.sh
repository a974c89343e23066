#!/usr/bin/env bash
# Fails when an #include goes the wrong way between qscope's libraries.
#   check_layers.sh BUILD/layers.txt SOURCE_DIR
# layers.txt is written by CMake's qscope_layer(): one "name|dir|deps|renderer" line per
# library, so the dependency graph has one home (the CMakeLists) and this script only
# checks the sources against it. A file in DIR may include headers of DIR and of the
# layers DIR depends on, directly or through others. A renderer (RENDERER) must reach
# nothing but the model and other renderers: a JSON writer that includes a probe would
# render state the Snapshot does not carry.
set -euo pipefail
layers=$1
src=$2

declare -A dir_of deps_of renderer lib_of_dir
while IFS='|' read -r name dir deps rend; do
  [[ -z $name ]] && continue
  dir_of[$name]=$dir
  deps_of[$name]=$deps
  renderer[$name]=$rend
  lib_of_dir[$dir]=$name
done <"$layers"

# Transitive closure of a library's dependencies (names, itself included).
closure() {
  local -A seen=()
  local stack=("$1") n d
  while ((${#stack[@]})); do
    n=${stack[-1]}
    unset 'stack[-1]'
    [[ -n ${seen[$n]:-} ]] && continue
    seen[$n]=1
    for d in ${deps_of[$n]:-}; do stack+=("$d"); done
  done
  echo "${!seen[@]}"
}

fail=0
for name in "${!dir_of[@]}"; do
  dir=${dir_of[$name]}
  reach=$(closure "$name")
  declare -A allowed=()
  for n in $reach; do
    [[ -n ${dir_of[$n]:-} ]] && allowed[${dir_of[$n]}]=1
    if [[ ${renderer[$name]} == 1 && $n != "$name" && $n != qscope_model && ${renderer[$n]:-0} != 1 ]]; then
      echo "check_layers: $name is a renderer but depends on $n (renderers link the model only)" >&2
      fail=1
    fi
  done
  shopt -s nullglob
  for f in "$src/$dir"/*.cpp "$src/$dir"/*.h; do
    while IFS= read -r inc; do
      # The header's layer is the folder that holds it: "probes/sock/sock_source.h" →
      # collector/probes/sock; "tui/view.h" → tui.
      hdir=$(dirname "$inc")
      if [[ -f $src/collector/$inc ]]; then
        hdir=collector/$hdir
      elif [[ ! -f $src/$inc ]]; then
        continue  # a system header or a generated skeleton
      fi
      if [[ -z ${lib_of_dir[$hdir]:-} ]]; then
        echo "check_layers: ${f#"$src"/} includes $inc, which belongs to no library" >&2
        fail=1
      elif [[ -z ${allowed[$hdir]:-} ]]; then
        echo "check_layers: ${f#"$src"/} includes $inc: $name ($dir) does not depend on ${lib_of_dir[$hdir]} ($hdir)" >&2
        fail=1
      fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\/[^"]*\)".*/\1/p' "$f")
  done
  unset allowed
done
if ((fail)); then
  echo "check_layers: FAIL (the layers and their dependencies: collector/CMakeLists.txt, docs/design.md)" >&2
  exit 1
fi
echo "check_layers: ${#dir_of[@]} libraries, every include goes down the layers"
