// llama_reference: greedy-decoding reference built on llama.cpp's public C API.
//
// Usage:  llama_reference MODEL.gguf PROMPT_IDS N
//   PROMPT_IDS  comma-separated token ids, e.g. 1,403,407,261,378
//   N           number of tokens to generate greedily (no EOS stop)
//
// Output (stdout, one JSON object):
//   {"prompt":[...],"greedy":[...],"logits":[...]}
// "logits" holds the full-vocabulary float logits of the final step, i.e. the
// step whose argmax produced the last greedy token (with N == 0: the logits
// after the prompt). Greedy = argmax, ties go to the lowest id.
// The model runs on the CPU only, one thread, with F32 K and V caches.
// Set LLAMA_REFERENCE_VERBOSE=1 to see llama.cpp's log output on stderr.
//
// Not part of the hearth build. Compile against a llama.cpp build tree
// (checked with the Feb 2025 snapshot, commit c392e50, built with
// `cmake -B build -G Ninja -DGGML_NATIVE=ON -DLLAMA_CURL=OFF
//  -DCMAKE_BUILD_TYPE=Release && ninja -C build llama`):
//
//   LLAMA=/tmp/llama.cpp   # source tree with the build in $LLAMA/build
//   g++ -std=c++17 -O2 -o llama_reference tests/support/llama_reference.cc -I$LLAMA/include
//   -I$LLAMA/ggml/include -L$LLAMA/build/bin -Wl,-rpath,$LLAMA/build/bin -lllama -lggml -lggml-base
//
// (libllama.so, libggml.so, libggml-base.so and libggml-cpu.so all land in
// $LLAMA/build/bin; the rpath lets the binary find them without LD_LIBRARY_PATH.)

#include "llama.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

bool g_verbose = false;

void log_sink(enum ggml_log_level level, const char* text, void* /*user*/) {
  if (g_verbose || level == GGML_LOG_LEVEL_ERROR) {
    std::fputs(text, stderr);
  }
}

bool parse_ids(const std::string& text, std::vector<llama_token>* out) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(pos, comma - pos);
    if (item.empty()) return false;
    char* end = nullptr;
    errno = 0;
    long value = std::strtol(item.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || value < 0 || value > 0x7fffffff) return false;
    out->push_back(static_cast<llama_token>(value));
    pos = comma + 1;
  }
  return !out->empty();
}

llama_token argmax(const float* logits, int n_vocab) {
  int best = 0;
  for (int i = 1; i < n_vocab; ++i) {
    if (logits[i] > logits[best]) best = i;  // strict: ties keep the lowest id
  }
  return static_cast<llama_token>(best);
}

// Decodes tokens[0..n) at positions start_pos.. in sequence 0; only the last
// token's logits are requested.
bool decode(llama_context* ctx, const llama_token* tokens, int n, int start_pos) {
  llama_batch batch = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    batch.token[i] = tokens[i];
    batch.pos[i] = start_pos + i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = (i == n - 1) ? 1 : 0;
  }
  batch.n_tokens = n;
  const int rc = llama_decode(ctx, batch);
  llama_batch_free(batch);
  if (rc != 0) {
    std::fprintf(stderr, "llama_decode failed with %d\n", rc);
    return false;
  }
  return true;
}

void print_int_array(const std::vector<llama_token>& v) {
  std::fputc('[', stdout);
  for (size_t i = 0; i < v.size(); ++i) {
    std::printf(i ? ",%d" : "%d", v[i]);
  }
  std::fputc(']', stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf PROMPT_IDS(comma-separated) N\n", argv[0]);
    return 2;
  }
  const char* env = std::getenv("LLAMA_REFERENCE_VERBOSE");
  g_verbose = env && *env && std::strcmp(env, "0") != 0;

  std::vector<llama_token> prompt;
  if (!parse_ids(argv[2], &prompt)) {
    std::fprintf(stderr, "bad prompt ids: '%s'\n", argv[2]);
    return 2;
  }
  char* end = nullptr;
  const long n_gen = std::strtol(argv[3], &end, 10);
  if (*end != '\0' || n_gen < 0 || n_gen > 100000) {
    std::fprintf(stderr, "bad N: '%s'\n", argv[3]);
    return 2;
  }

  llama_log_set(log_sink, nullptr);
  llama_backend_init();

  llama_model_params mparams = llama_model_default_params();
  mparams.n_gpu_layers = 0;
  mparams.use_mmap = true;
  llama_model* model = llama_model_load_from_file(argv[1], mparams);
  if (!model) {
    std::fprintf(stderr, "failed to load model %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  for (llama_token t : prompt) {
    if (t >= n_vocab) {
      std::fprintf(stderr, "prompt token %d out of range (n_vocab %d)\n", t, n_vocab);
      return 2;
    }
  }

  const int n_total = static_cast<int>(prompt.size() + n_gen);
  llama_context_params cparams = llama_context_default_params();
  cparams.n_ctx = static_cast<uint32_t>(((n_total + 255) / 256) * 256);
  cparams.n_batch = static_cast<uint32_t>(prompt.size() < 512 ? 512 : prompt.size());
  cparams.n_ubatch = cparams.n_batch;
  cparams.n_seq_max = 1;
  cparams.n_threads = 1;
  cparams.n_threads_batch = 1;
  cparams.type_k = GGML_TYPE_F32;
  cparams.type_v = GGML_TYPE_F32;
  cparams.flash_attn = false;
  cparams.offload_kqv = false;
  cparams.no_perf = true;
  llama_context* ctx = llama_init_from_model(model, cparams);
  if (!ctx) {
    std::fprintf(stderr, "failed to create context\n");
    return 1;
  }

  if (!decode(ctx, prompt.data(), static_cast<int>(prompt.size()), 0)) return 1;

  std::vector<llama_token> greedy;
  std::vector<float> last(llama_get_logits_ith(ctx, -1), llama_get_logits_ith(ctx, -1) + n_vocab);
  int pos = static_cast<int>(prompt.size());
  for (long step = 0; step < n_gen; ++step) {
    if (step > 0) {
      const llama_token prev = greedy.back();
      if (!decode(ctx, &prev, 1, pos)) return 1;
      ++pos;
      const float* logits = llama_get_logits_ith(ctx, -1);
      last.assign(logits, logits + n_vocab);
    }
    greedy.push_back(argmax(last.data(), n_vocab));
  }

  std::fputs("{\"prompt\":", stdout);
  print_int_array(prompt);
  std::fputs(",\"greedy\":", stdout);
  print_int_array(greedy);
  std::fputs(",\"logits\":[", stdout);
  for (int i = 0; i < n_vocab; ++i) {
    std::printf(i ? ",%.9g" : "%.9g", static_cast<double>(last[i]));
  }
  std::fputs("]}\n", stdout);

  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
