// A second instance of a loaded model costs only its KV cache and planned
// arena: resident memory with N instances stays within 10% of
// weights + N x (KV cache + arena).
//
// Measured as the process's resident set (/proc/self/statm), so everything
// counts: heap, anonymous mappings and the pages of the mapped model file.
#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "engine/module.h"
#include "engine/synthetic_model.h"
#include "kernels/thread_pool.h"
#include "memory/thread_temp_allocator.h"

namespace hearth::engine {
namespace {

namespace fs = std::filesystem;

// Resident bytes of this process. malloc_trim first, so memory the program
// has freed but glibc still holds on its free lists (e.g. the temporary
// vectors of the loader) is returned and not mistaken for live memory.
std::size_t resident_bytes() {
  ::malloc_trim(0);
  std::ifstream statm("/proc/self/statm");
  std::size_t size_pages = 0, resident_pages = 0;
  statm >> size_pages >> resident_pages;
  return resident_pages * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

// What the temp allocators of all threads hold (in use + cached): scratch,
// not part of an instance; subtracted from every reading.
std::size_t temp_reserved_bytes() {
  return static_cast<std::size_t>(TempAllocatorRegistry::snapshot().total.reserved_bytes);
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

TEST(InstanceMemory, ExtraInstancesCostTheirKvCacheAndArenaOnly) {
#if defined(HEARTH_SANITIZER_ADDRESS)
  GTEST_SKIP() << "ASan's shadow memory and quarantine change the resident set";
#endif
  SyntheticModelSpec spec;
  spec.n_embd = 512;
  spec.n_layer = 8;
  spec.n_head = 8;
  spec.n_head_kv = 8;
  spec.n_ff = 1408;
  spec.n_vocab = 8000;
  spec.context_length = 2048;
  spec.weight_type = GgmlType::kQ8_0;
  spec.seed = 3;
  const fs::path path = fs::temp_directory_path() /
                        ("hearth_instance_memory_" + std::to_string(::getpid()) + ".gguf");
  {
    auto bytes = synthesize_model(spec);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    std::ofstream(path, std::ios::binary) << *bytes;
  }
  struct Cleanup {
    fs::path p;
    ~Cleanup() { fs::remove(p); }
  } cleanup{path};

  // Process-wide one-time costs before the baseline: the kernel thread pool
  // (its threads' stacks) is created on the first load otherwise.
  kernels::default_thread_pool();

  const std::size_t rss0 = resident_bytes() - temp_reserved_bytes();
  auto opened = GgufFile::open(path.string());
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<const GgufFile> file = std::move(*opened);
  const std::size_t rss_open = resident_bytes() - temp_reserved_bytes();
  auto loaded = ModelWeights::load(file);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  std::shared_ptr<const ModelWeights> weights = std::move(*loaded);

  // The embedding table is read in place from the mapping; a serving process
  // touches rows of it over time. Bring all of it in now so it is counted
  // once, with the weights, and not in whichever instance first reads a row.
  const GgufTensorInfo* embd = file->find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  ASSERT_EQ(weights->embedding(), embd->data);
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  volatile std::uint8_t sink = 0;
  for (std::size_t i = 0; i < embd->n_bytes; i += page) sink = sink + embd->data[i];
  sink = sink + embd->data[embd->n_bytes - 1];
  const std::size_t rss_weights = resident_bytes() - temp_reserved_bytes();

  const std::size_t packed = weights->packed_bytes(), embedding = embd->n_bytes;
  const std::size_t weight_bytes = packed + embedding;
  std::printf(
      "[memory] model: %zu layers x %zu wide, ffn %zu, vocab %zu, %s; file %.2f MiB\n"
      "[memory] weights: packed projections %zu bytes (%.2f MiB) + embedding table %zu bytes "
      "(%.2f MiB) = %.2f MiB\n"
      "[memory] RSS: open +%.2f MiB (header of %zu bytes parsed, with the pages the kernel maps "
      "around each fault), weights loaded and table touched +%.2f MiB\n",
      spec.n_layer, spec.n_embd, spec.n_ff, spec.n_vocab, weights->quantization().c_str(),
      mib(static_cast<double>(file->size())), packed, mib(static_cast<double>(packed)), embedding,
      mib(static_cast<double>(embedding)), mib(static_cast<double>(weight_bytes)),
      mib(static_cast<double>(rss_open) - static_cast<double>(rss0)), file->data_offset(),
      mib(static_cast<double>(rss_weights) - static_cast<double>(rss_open)));

  // The loader keeps packed copies of the projections and drops their file
  // pages (release_pages): the weights cost their packed bytes plus the table,
  // not the file on top.
  EXPECT_NEAR(static_cast<double>(rss_weights) - static_cast<double>(rss_open),
              static_cast<double>(weight_bytes), 0.1 * static_cast<double>(weight_bytes));

  ModuleOptions options;
  options.context_length = 256;
  options.max_chunk = 64;
  options.kv_cache = KvCacheType::kInt8;
  std::vector<std::unique_ptr<Module>> instances;
  std::vector<std::int32_t> chunk(options.max_chunk);
  std::size_t previous = rss_weights, per_instance = 0;
  constexpr int kInstances = 3;
  for (int n = 1; n <= kInstances; ++n) {
    auto m = Module::load(weights, options);
    ASSERT_TRUE(m.ok()) << m.status();
    Module& module = **m;
    const std::size_t created = resident_bytes() - temp_reserved_bytes();
    // Prefill the whole context so every KV cache page and every activation
    // buffer of this instance is written (resident). The same tokens for every
    // instance, so no instance touches anything of the shared weights the
    // others have not.
    for (std::size_t pos = 0; pos < options.context_length; pos += options.max_chunk) {
      for (std::size_t i = 0; i < chunk.size(); ++i)
        chunk[i] = static_cast<std::int32_t>((pos + i) * 2654435761u % spec.n_vocab);
      auto logits = module.forward(chunk, pos);
      ASSERT_TRUE(logits.ok()) << logits.status();
      thread_temp_allocator().reset();
    }
    const std::size_t temp = temp_reserved_bytes();
    const std::size_t filled = resident_bytes() - temp;
    const ModuleMemoryReport r = module.memory_report();
    // The arena holds the activation buffers and the KV cache (plus at most
    // 64 bytes of alignment per buffer): KV + activations is what it costs.
    per_instance = r.kv_cache_bytes + r.planned_bytes;
    EXPECT_GE(r.arena_capacity_bytes, per_instance);
    EXPECT_LE(r.arena_capacity_bytes, per_instance + 64 * (spec.n_layer + 2));
    EXPECT_EQ(r.arena_used_bytes, per_instance);
    const double marginal = static_cast<double>(filled) - static_cast<double>(previous);
    std::printf(
        "[memory] instance %d: KV cache %zu + activations %zu = %zu bytes (%.2f MiB; arena "
        "capacity %zu); RSS after load +%.2f MiB, after filling the context +%.2f MiB "
        "(%.1f%% of KV + activations); temp allocator reserved %zu bytes (subtracted; peak in one "
        "forward %zu)\n",
        n, r.kv_cache_bytes, r.planned_bytes, per_instance, mib(static_cast<double>(per_instance)),
        r.arena_capacity_bytes, mib(static_cast<double>(created) - static_cast<double>(previous)),
        mib(marginal), 100.0 * marginal / static_cast<double>(per_instance), temp,
        r.peak_temp_bytes);
    if (n >= 2) {
      // Instance 1 also carries process-wide one-time costs (first-use state of
      // the kernels); from the second on, an instance is its arena, no more.
      // Loading one commits nothing until it is used (no copy of the weights):
      // its arena's pages come in as the context fills.
      EXPECT_LT(static_cast<double>(created) - static_cast<double>(previous),
                0.1 * static_cast<double>(per_instance))
          << "instance " << n << " made memory resident at load";
      EXPECT_NEAR(marginal, static_cast<double>(per_instance),
                  0.1 * static_cast<double>(per_instance))
          << "instance " << n;
    }
    previous = filled;
    instances.push_back(std::move(*m));
  }
  const double growth = static_cast<double>(previous) - static_cast<double>(rss0);
  const double expected =
      static_cast<double>(weight_bytes) + kInstances * static_cast<double>(per_instance);
  std::printf(
      "[memory] %d instances: RSS growth %.2f MiB; weights + %d x (KV + activations) = %.2f MiB "
      "(%.1f%%)\n",
      kInstances, mib(growth), kInstances, mib(expected), 100.0 * growth / expected);
  // Beyond the formula the growth holds (measured here: about 2.3 MiB, 5%):
  // - the mapped header (168 KB of metadata and vocabulary), which the kernel
  //   maps in far larger units than it is read: fault-around and large
  //   page-cache folios make it ~2 MiB resident on ext4 with a 6.x kernel;
  // - the pages the norms are read from and the partial pages at tensor
  //   boundaries that release_pages keeps, and the loaded norm vectors;
  // - instance 1's one-time state (logger, kernel first use): ~0.3 MiB.
  // The temp allocator's scratch (4.4 MiB here: kernels take scratch for a
  // whole forward and it is reset only between steps, so it grows with the
  // layer count) is per thread, not per instance, and is subtracted above.
  EXPECT_NEAR(growth, expected, 0.1 * expected);
}

}  // namespace
}  // namespace hearth::engine
