// hearth-generate: load a model and stream a completion to the terminal.
//
//   hearth-generate --model FILE --prompt TEXT [--max-tokens N] [--temperature T] ... [--json]
//
// Text goes to stdout as it is generated, the statistics to stderr at the end.
// With --json, stdout carries one JSON object per line for each piece
// ({"text":..., "token":id}) and a final object with prompt_ids,
// generated_ids, finish_reason and the stats.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/cli_flags.h"
#include "base/str_cat.h"
#include "engine/generation.h"
#include "kernels/thread_pool.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

namespace {

constexpr const char* kUsage = R"(usage: hearth-generate --model FILE --prompt TEXT [options]

  --model FILE            GGUF model file
  --prompt TEXT           prompt text
  --max-tokens N          tokens to generate (default 128)
  --temperature T         0 = greedy (default 0)
  --top-k N  --top-p P  --min-p P
  --repeat-penalty R  --presence-penalty P  --frequency-penalty F  --penalty-last-n N
  --seed N                sampling seed (default 0)
  --stop TEXT             stop string (repeatable)
  --ignore-eos            keep generating past end-of-sequence tokens
  --context N             KV cache positions (default: the model's, at most 4096)
  --kv-cache int8|float   KV cache type (default int8)
  --convert q8_0|q4_0     quantize float projection weights at load
  --threads N             kernel threads (default: physical cores)
  --bos / --no-bos        add the BOS token (default: the model's rule)
  --parse-special         parse special-token text such as <s> in the prompt
  --json                  one JSON object per line (pieces, then a summary)
)";

int fail(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace hearth;
  // stdout carries the completion (or JSON); logs go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("hearth"));
  hearth::Flags flags("hearth-generate",
                      {"model", "prompt", "max-tokens", "temperature", "top-k", "top-p", "min-p",
                       "repeat-penalty", "presence-penalty", "frequency-penalty", "penalty-last-n",
                       "seed", "stop", "context", "kv-cache", "convert", "threads"},
                      {"json", "bos", "parse-special", "ignore-eos", "help"});
  if (!flags.parse(argc, argv)) return fail(flags.error());
  if (flags.get_bool("help").value_or(false)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!flags.positional().empty())
    return fail("hearth-generate: unexpected argument '" + flags.positional()[0] + "'");
  if (!flags.has("model"))
    return fail(std::string("hearth-generate: --model is required\n").append(kUsage));
  if (!flags.has("prompt")) return fail("hearth-generate: --prompt is required");

  engine::GenerationRequest req;
  req.prompt = flags.get("prompt");
  std::int64_t max_tokens = 128, top_k = 0, last_n = 64, seed = 0, context = 0, threads = 0;
  double temperature = 0, top_p = 1, min_p = 0, rep = 1, presence = 0, frequency = 0;
  const bool ok = flags.get_int("max-tokens", 0, 1 << 20, &max_tokens) &&
                  flags.get_int("top-k", 0, 1 << 24, &top_k) &&
                  flags.get_int("penalty-last-n", 0, 4096, &last_n) &&
                  flags.get_int("seed", 0, INT64_MAX, &seed) &&
                  flags.get_int("context", 0, 1 << 20, &context) &&
                  flags.get_int("threads", 0, 1024, &threads) &&
                  flags.get_float("temperature", 0, 100, &temperature) &&
                  flags.get_float("top-p", 0, 1, &top_p) &&
                  flags.get_float("min-p", 0, 1, &min_p) &&
                  flags.get_float("repeat-penalty", 0, 10, &rep) &&
                  flags.get_float("presence-penalty", -2, 2, &presence) &&
                  flags.get_float("frequency-penalty", -2, 2, &frequency);
  if (!ok) return fail(flags.error());
  req.max_tokens = static_cast<std::size_t>(max_tokens);
  req.sampling.temperature = static_cast<float>(temperature);
  req.sampling.top_k = static_cast<std::int32_t>(top_k);
  req.sampling.top_p = static_cast<float>(top_p);
  req.sampling.min_p = static_cast<float>(min_p);
  req.sampling.repetition_penalty = static_cast<float>(rep);
  req.sampling.presence_penalty = static_cast<float>(presence);
  req.sampling.frequency_penalty = static_cast<float>(frequency);
  req.sampling.penalty_last_n = static_cast<std::int32_t>(last_n);
  req.sampling.seed = static_cast<std::uint64_t>(seed);
  req.stop = flags.get_all("stop");
  req.ignore_eos = flags.get_bool("ignore-eos").value_or(false);
  req.tokenize.add_bos = flags.get_bool("bos");
  req.tokenize.parse_special = flags.get_bool("parse-special").value_or(false);
  const bool json = flags.get_bool("json").value_or(false);

  engine::ModuleOptions options;
  options.context_length = static_cast<std::size_t>(context);
  const std::string kv = flags.get("kv-cache", "int8");
  if (kv == "int8") {
    options.kv_cache = engine::KvCacheType::kInt8;
  } else if (kv == "float") {
    options.kv_cache = engine::KvCacheType::kFloat;
  } else {
    return fail("hearth-generate: --kv-cache: '" + kv + "' is not int8 or float");
  }
  if (flags.has("convert")) {
    const std::string c = flags.get("convert");
    if (c == "q8_0") {
      options.load.convert = engine::LoadOptions::Convert::kQ8_0;
    } else if (c == "q4_0") {
      options.load.convert = engine::LoadOptions::Convert::kQ4_0;
    } else {
      return fail("hearth-generate: --convert: '" + c + "' is not q8_0 or q4_0");
    }
  }
  if (threads > 0) kernels::set_default_thread_count(static_cast<std::size_t>(threads));

  const std::string path = flags.get("model");
  auto file = engine::GgufFile::open(path);
  if (!file.ok()) return fail("hearth-generate: " + std::string(file.status().message()));
  std::shared_ptr<const engine::GgufFile> shared_file = std::move(*file);
  auto tokenizer = engine::Tokenizer::from_gguf(*shared_file);
  if (!tokenizer.ok()) return fail("hearth-generate: " + std::string(tokenizer.status().message()));
  auto module = engine::Module::load(shared_file, options);
  if (!module.ok()) return fail("hearth-generate: " + std::string(module.status().message()));

  auto on_token = [&](std::string_view text, std::int32_t token) {
    if (json) {
      std::printf("{\"text\":%s,\"token\":%d}\n", hearth::json_string(std::string(text)).c_str(),
                  token);
    } else {
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    std::fflush(stdout);
  };
  auto result = engine::generate(**module, **tokenizer, req, on_token);
  if (!result.ok()) return fail("hearth-generate: " + std::string(result.status().message()));
  const auto& s = result->stats;
  if (json) {
    auto ids = [](const std::vector<std::int32_t>& v) {
      std::string out = "[";
      for (std::size_t i = 0; i < v.size(); ++i) {
        if (i) out += ",";
        out += std::to_string(v[i]);
      }
      return out + "]";
    };
    std::printf(
        "{\"prompt_ids\":%s,\"generated_ids\":%s,\"finish_reason\":\"%s\",\"text\":%s,\"stats\":{"
        "\"prompt_tokens\":%zu,"
        "\"generated_tokens\":%zu,\"time_to_first_token_s\":%.6f,\"prefill_tokens_per_s\":%.2f,"
        "\"decode_tokens_per_s\":%.2f,\"total_s\":%.6f,\"temp_allocator_lookups\":%llu,\"temp_"
        "allocator_hits\":%llu,"
        "\"temp_allocator_misses\":%llu,\"temp_allocator_peak_bytes\":%llu}}\n",
        ids(result->prompt_ids).c_str(), ids(result->generated_ids).c_str(),
        engine::finish_reason_name(result->finish), hearth::json_string(result->text).c_str(),
        s.prompt_tokens, s.generated_tokens, s.time_to_first_token_s, s.prefill_tokens_per_s(),
        s.decode_tokens_per_s(), s.total_s, static_cast<unsigned long long>(s.temp_lookups),
        static_cast<unsigned long long>(s.temp_hits),
        static_cast<unsigned long long>(s.temp_misses),
        static_cast<unsigned long long>(s.temp_peak_bytes));
  } else {
    std::printf("\n");
    std::fprintf(
        stderr,
        "\n[hearth] finish: %s | prompt %zu tokens, generated %zu | time to first token %.1f ms | "
        "prefill %.1f tok/s | decode %.1f tok/s\n[hearth] temp allocator: %llu lookups, %llu hits "
        "(%.2f%%), %llu misses, peak %llu bytes\n",
        engine::finish_reason_name(result->finish), s.prompt_tokens, s.generated_tokens,
        s.time_to_first_token_s * 1e3, s.prefill_tokens_per_s(), s.decode_tokens_per_s(),
        static_cast<unsigned long long>(s.temp_lookups),
        static_cast<unsigned long long>(s.temp_hits),
        s.temp_lookups
            ? 100.0 * static_cast<double>(s.temp_hits) / static_cast<double>(s.temp_lookups)
            : 0.0,
        static_cast<unsigned long long>(s.temp_misses),
        static_cast<unsigned long long>(s.temp_peak_bytes));
  }
  return 0;
}
