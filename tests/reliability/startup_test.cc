// Startup faults: a model file that is truncated or corrupt makes the server
// exit 1 with an error naming the file; with several models and --keep-going
// the others serve while the broken one is FAILED (ListModels/GetModel carry
// its error, its health is NOT_SERVING, requests for it are UNAVAILABLE); a
// metrics address already taken is a startup error (exit 1) naming the address.
// No generation beyond a few tokens: short enough for ThreadSanitizer too.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/reliability/reliability_util.h"

namespace hearth::testing {
namespace {

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::string write_bytes(const std::string& name, const std::string& bytes) {
  const std::string path = (scratch_dir() / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  EXPECT_TRUE(out.good()) << "cannot write " << path;
  return path;
}

// Overwrites bytes [at, at + 8) of `bytes` with a little-endian uint64.
std::string patch_u64(std::string bytes, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) bytes[at + i] = static_cast<char>((v >> (8 * i)) & 0xFF);
  return bytes;
}

struct BrokenModel {
  std::string what;
  std::string path;
};

// Broken copies of a good synthetic model. GGUF layout: magic "GGUF" (4),
// version u32 (4), tensor count u64 (8), metadata count u64 (8), then the
// metadata: key length u64, key bytes, value type u32, value...
std::vector<BrokenModel> broken_models(const std::string& good) {
  const std::string bytes = read_bytes(good);
  EXPECT_GT(bytes.size(), 4096u);
  std::string bad_magic = bytes;
  bad_magic.replace(0, 4, "GGUX");
  std::string bad_version = bytes;
  bad_version[4] = static_cast<char>(0x7F);
  std::string zeroed_middle = bytes;  // the metadata and tensor table garbled
  for (std::size_t i = 24; i < 4096; ++i) zeroed_middle[i] = static_cast<char>(0xA5);
  return {
      {"empty file", write_bytes("empty.gguf", "")},
      {"truncated inside the header", write_bytes("trunc_header.gguf", bytes.substr(0, 20))},
      {"truncated in the metadata", write_bytes("trunc_meta.gguf", bytes.substr(0, 200))},
      {"truncated to half (tensor data missing)",
       write_bytes("trunc_half.gguf", bytes.substr(0, bytes.size() / 2))},
      {"one byte short", write_bytes("trunc_1.gguf", bytes.substr(0, bytes.size() - 1))},
      {"bad magic", write_bytes("bad_magic.gguf", bad_magic)},
      {"unknown version", write_bytes("bad_version.gguf", bad_version)},
      {"tensor count 2^63", write_bytes("huge_tensors.gguf", patch_u64(bytes, 8, 1ull << 63))},
      {"metadata count 2^60", write_bytes("huge_meta.gguf", patch_u64(bytes, 16, 1ull << 60))},
      {"first key length 2^62", write_bytes("huge_key.gguf", patch_u64(bytes, 24, 1ull << 62))},
      {"metadata and tensor table garbled", write_bytes("garbled.gguf", zeroed_middle)},
  };
}

// Loopback gRPC on a free port, no metrics endpoint (whose shutdown costs
// seconds), plus `extra`.
std::vector<std::string> no_metrics_args(const std::vector<std::string>& extra) {
  std::vector<std::string> a = {"--listen", "127.0.0.1:0", "--metrics-listen", "off"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

TEST(StartupFaultTest, BrokenModelFileExitsWithStatus1NamingTheFile) {
  const std::string good = small_model();
  ASSERT_FALSE(good.empty());
  for (const BrokenModel& b : broken_models(good)) {
    SCOPED_TRACE(b.what);
    std::string err;
    EXPECT_EQ(expect_startup_failure(no_metrics_args({"--model", "broken=" + b.path}), &err), 1)
        << err;
    EXPECT_NE(err.find(b.path), std::string::npos) << "stderr should name the file:\n" << err;
    EXPECT_NE(err.find("broken"), std::string::npos) << "stderr should name the model:\n" << err;
    EXPECT_EQ(err.find("ready"), std::string::npos) << err;
  }
  // Several models, no --keep-going: one broken file stops the server.
  const std::string truncated = (scratch_dir() / "trunc_half.gguf").string();
  std::string err;
  EXPECT_EQ(
      expect_startup_failure(
          no_metrics_args({"--model", "good=" + good, "--model", "broken=" + truncated}), &err),
      1)
      << err;
  EXPECT_NE(err.find(truncated), std::string::npos) << err;
}

TEST(StartupFaultTest, KeepGoingServesTheOthersAndReportsTheBrokenOne) {
  const std::string good = small_model();
  ASSERT_FALSE(good.empty());
  const std::vector<BrokenModel> broken = broken_models(good);
  const std::string truncated = broken[3].path;  // truncated to half
  const std::string garbled = broken.back().path;
  ServerProcess server;
  // The broken ones first: loading goes on past them.
  HEARTH_START_SERVER(
      server, server_args({"--keep-going", "--kernel-threads", "1", "--model", "cut=" + truncated,
                           "--model", "good=" + good, "--model", "garbled=" + garbled}));
  auto channel = plain_channel(server.grpc_address());
  auto stub = make_stub(channel);

  v1::ListModelsResponse list;
  {
    grpc::ClientContext ctx;
    set_deadline(ctx, seconds(30));
    const grpc::Status st = stub->ListModels(&ctx, v1::ListModelsRequest(), &list);
    ASSERT_TRUE(st.ok()) << status_text(st);
  }
  ASSERT_EQ(list.models_size(), 3);
  std::map<std::string, v1::ModelInfo> by_name;
  for (const v1::ModelInfo& m : list.models()) by_name[m.name()] = m;
  ASSERT_EQ(by_name.count("good"), 1u);
  EXPECT_EQ(by_name["good"].state(), v1::ModelInfo::STATE_SERVING);
  EXPECT_TRUE(by_name["good"].error().empty()) << by_name["good"].error();
  for (const auto& [name, path] :
       {std::pair<std::string, std::string>{"cut", truncated}, {"garbled", garbled}}) {
    SCOPED_TRACE(name);
    ASSERT_EQ(by_name.count(name), 1u);
    const v1::ModelInfo& m = by_name[name];
    EXPECT_EQ(m.state(), v1::ModelInfo::STATE_FAILED);
    EXPECT_NE(m.error().find(path), std::string::npos)
        << "error should name the file: " << m.error();
    EXPECT_EQ(m.instances(), 0u);
    EXPECT_EQ(m.source(), path);
    std::cout << "[startup] " << name << " FAILED: " << m.error() << std::endl;

    v1::ModelInfo info;
    ASSERT_TRUE(get_model(*stub, name, &info).ok());
    EXPECT_EQ(info.state(), v1::ModelInfo::STATE_FAILED);
    EXPECT_EQ(info.error(), m.error());

    int serving = -1;
    ASSERT_TRUE(health_check(channel, name, &serving).ok());
    EXPECT_EQ(serving, kNotServing);

    const StreamResult r = generate(*stub, make_request(name, "hello", 4));
    // Not UNAVAILABLE, which tells clients to retry: this lasts until a restart.
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::FAILED_PRECONDITION)
        << status_text(r.status);
    EXPECT_NE(r.status.error_message().find("failed to load"), std::string::npos)
        << status_text(r.status);
  }
  int serving = -1;
  ASSERT_TRUE(health_check(channel, "good", &serving).ok());
  EXPECT_EQ(serving, kServing);
  ASSERT_TRUE(health_check(channel, "", &serving).ok());
  EXPECT_EQ(serving, kServing) << "the server serves its good model";

  v1::GenerateRequest req = make_request("good", "the good one", 8);
  req.set_ignore_eos(true);
  const StreamResult r = generate(*stub, req);
  ASSERT_TRUE(r.status.ok()) << status_text(r.status);
  EXPECT_EQ(r.ids().size(), 8u);

  const auto m = scrape(server);
  EXPECT_EQ(metric(m, "hearth_model_state{model=\"cut\",state=\"failed\"}"), 1.0);
  EXPECT_EQ(metric(m, "hearth_model_state{model=\"good\",state=\"serving\"}"), 1.0);
}

TEST(StartupFaultTest, KeepGoingWithEveryModelBrokenStillFails) {
  const std::string good = small_model();
  ASSERT_FALSE(good.empty());
  const std::vector<BrokenModel> broken = broken_models(good);
  std::string err;
  EXPECT_EQ(
      expect_startup_failure(no_metrics_args({"--keep-going", "--model", "a=" + broken[3].path,
                                              "--model", "b=" + broken[5].path}),
                             &err),
      1)
      << err;
  EXPECT_NE(err.find(broken[3].path), std::string::npos) << err;
}

TEST(StartupFaultTest, MetricsAddressTakenExitsWithStatus1NamingTheAddress) {
  // Hold a port: bound and listening on loopback.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string taken = "127.0.0.1:" + std::to_string(ntohs(addr.sin_port));

  std::string err;
  EXPECT_EQ(expect_startup_failure({"--listen", "127.0.0.1:0", "--metrics-listen", taken}, &err), 1)
      << err;
  EXPECT_NE(err.find(taken), std::string::npos) << "stderr should name " << taken << ":\n" << err;
  std::cout << "[startup] metrics address taken: "
            << err.substr(err.rfind('\n', err.size() - 2) + 1);

  // The metrics port of a running hearth-server, too.
  ServerProcess first;
  HEARTH_START_SERVER(first, server_args());
  ASSERT_NE(first.metrics_port(), 0);
  EXPECT_EQ(expect_startup_failure(
                {"--listen", "127.0.0.1:0", "--metrics-listen", first.metrics_address()}, &err),
            1)
      << err;
  EXPECT_NE(err.find(first.metrics_address()), std::string::npos) << err;
  // The first one is unharmed.
  auto stub = make_stub(plain_channel(first.grpc_address()));
  v1::GenerateRequest req = make_request("demo", "still here", 4);
  req.set_ignore_eos(true);
  EXPECT_TRUE(generate(*stub, req).status.ok());
  EXPECT_TRUE(scrape(first).count("process_resident_memory_bytes"));
}

}  // namespace
}  // namespace hearth::testing
