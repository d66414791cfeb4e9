# Sourced by the server bench scripts: how many of `hearth bench`'s prompt
# words make a prompt of a given number of tokens on a model. Uses the
# caller's $build (hearth build tree) and $model (GGUF file).
_prompt_words_helper=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/batching_load.py

count_tokens() {  # count_tokens WORDS: tokens of `hearth bench --prompt-tokens WORDS` (with BOS)
  local prompt ids
  prompt=$(/usr/bin/python3 "$_prompt_words_helper" prompt "$1") ||
    { echo "prompt_words.sh: batching_load.py prompt $1 failed (above)" >&2; return 1; }
  ids=$(printf '%s' "$prompt" | "$build/tools/hearth-model" tokenize "$model") ||
    { echo "prompt_words.sh: hearth-model tokenize $model failed (above)" >&2; return 1; }
  /usr/bin/python3 -c 'import json,sys; print(len(json.load(sys.stdin)))' <<<"$ids"
}
# words_for TOKENS: the most words whose prompt is at most TOKENS tokens (the
# synthetic vocabularies split some words; a binary search, ~log2(TOKENS) steps).
words_for() {
  local want=$1 lo=1 hi=$1 mid n
  n=$(count_tokens "$hi") || return 1
  if [ "$n" -le "$want" ]; then echo "$hi"; return; fi
  while [ "$lo" -lt "$hi" ]; do
    mid=$(( (lo + hi + 1) / 2 ))
    n=$(count_tokens "$mid") || return 1
    if [ "$n" -le "$want" ]; then lo=$mid; else hi=$(( mid - 1 )); fi
  done
  echo "$lo"
}
