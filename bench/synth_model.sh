# Sourced by the bench scripts: the synthetic models they share.
#
# TINYLLAMA_SHAPE: the TinyLlama 1.1B shape that bench_engine calls (b).
# synth_model BUILD "SHAPE FLAGS" TYPE NAME DIR: prints DIR/NAME, writing it
# with `hearth-model synth` first when it is absent (through a temporary
# file, so an interrupted run leaves no half-written model behind).
TINYLLAMA_SHAPE="--dim 2048 --layers 22 --heads 32 --kv-heads 4 --ffn 5632 --vocab 32000"

synth_model() {
  local build=$1 shape=$2 type=$3 name=$4 dir=$5
  local model=$dir/$name
  mkdir -p "$dir"
  if [ ! -s "$model" ]; then
    echo "synthesizing $model (hearth-model synth $shape --type $type)" >&2
    local err
    # shellcheck disable=SC2086
    if ! err=$("$build/tools/hearth-model" synth "$model.tmp.$$" $shape --type "$type" \
      --context 2048 --name "$name" 2>&1 >/dev/null); then
      printf '%s\n' "$err" >&2
      rm -f "$model.tmp.$$"  # what a failed write (a full disk, say) left
      return 1
    fi
    mv "$model.tmp.$$" "$model"
  fi
  printf '%s\n' "$model"
}
