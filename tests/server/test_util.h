// Shared helpers of the hearth-server integration tests: starting servers,
// calling them (hearth.v1 stubs, plus grpc.health.v1 and server reflection
// spoken through raw protobuf wire bytes: Debian ships neither's C++ stubs),
// bounded polling of GetModel, and the models the tests run on.
//
// Every RPC gets a deadline, so a broken server fails a test instead of
// hanging it. Waiting is bounded polling of real state or stream events;
// nothing sleeps.
#pragma once

#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/unknown_field_set.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/sync_stream.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hearth/v1/inference.grpc.pb.h"
#include "tests/support/server_process.h"

namespace hearth::testing {

namespace v1 = ::hearth::v1;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

#if defined(HEARTH_SANITIZER_THREAD)
inline constexpr bool kUnderTsan = true;
#else
inline constexpr bool kUnderTsan = false;
#endif
#if defined(HEARTH_SANITIZER_THREAD) || defined(HEARTH_SANITIZER_ADDRESS)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif

// Upper bound of any single wait in these tests: generous, since it only
// matters when something is broken (then the test fails instead of hanging).
inline milliseconds patience() { return kUnderSanitizer ? seconds(180) : seconds(120); }

// Loopback, free ports for gRPC and metrics, plus `extra`.
inline std::vector<std::string> server_args(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> a = {"--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

inline std::shared_ptr<grpc::Channel> plain_channel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  // A fresh connection per channel: tests must not share one by accident.
  static std::atomic<int> counter{0};
  args.SetInt("hearth.test.channel", counter++);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

inline std::unique_ptr<v1::Inference::Stub> make_stub(const std::shared_ptr<grpc::Channel>& ch) {
  return v1::Inference::NewStub(ch);
}

inline void set_deadline(grpc::ClientContext& ctx, milliseconds timeout = patience()) {
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
}

inline std::string status_text(const grpc::Status& s) {
  return "status " + std::to_string(static_cast<int>(s.error_code())) + " '" + s.error_message() +
         "'";
}

inline v1::GenerateRequest make_request(const std::string& model, const std::string& prompt,
                                        std::uint32_t max_tokens) {
  v1::GenerateRequest r;
  r.set_model(model);
  r.set_prompt(prompt);
  r.set_max_tokens(max_tokens);
  return r;
}

// Everything one Generate stream delivered.
struct StreamResult {
  grpc::Status status;
  std::vector<v1::Piece> pieces;
  std::vector<v1::Done> dones;  // exactly one on success
  bool piece_after_done = false;

  std::string text() const {
    std::string t;
    for (const auto& p : pieces) t += p.text();
    return t;
  }
  // Ids of the pieces that carry a token (-1 marks text flushed at the end).
  std::vector<std::int32_t> ids() const {
    std::vector<std::int32_t> v;
    for (const auto& p : pieces)
      if (p.token_id() >= 0) v.push_back(p.token_id());
    return v;
  }
};

// A Generate stream the test steps through: the request is sent when the
// object is made; next() reads one message, cancel() cancels, finish() reads
// the rest and returns the status.
class OpenStream {
 public:
  OpenStream(v1::Inference::Stub& stub, const v1::GenerateRequest& req,
             milliseconds timeout = patience(),
             const std::vector<std::pair<std::string, std::string>>& metadata = {}) {
    set_deadline(ctx_, timeout);
    for (const auto& [k, v] : metadata) ctx_.AddMetadata(k, v);
    reader_ = stub.Generate(&ctx_, req);
  }
  OpenStream(const OpenStream&) = delete;
  OpenStream& operator=(const OpenStream&) = delete;
  ~OpenStream() {
    if (!finished_) {
      ctx_.TryCancel();
      reader_->Finish();
    }
  }

  // Reads one message into the result; false at the end of the stream.
  bool next() {
    v1::GenerateResponse msg;
    if (!reader_->Read(&msg)) return false;
    if (msg.has_piece()) {
      if (!result_.dones.empty()) result_.piece_after_done = true;
      result_.pieces.push_back(msg.piece());
    } else if (msg.has_done()) {
      result_.dones.push_back(msg.done());
    }
    return true;
  }
  // Reads until the first piece (or the end of the stream); true if one came.
  bool wait_first_piece() {
    while (result_.pieces.empty()) {
      if (!next()) return false;
    }
    return true;
  }
  void cancel() { ctx_.TryCancel(); }
  const grpc::Status& finish() {
    if (!finished_) {
      while (next()) {
      }
      result_.status = reader_->Finish();
      finished_ = true;
    }
    return result_.status;
  }
  const StreamResult& result() const { return result_; }
  grpc::ClientContext& context() { return ctx_; }

 private:
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader_;
  StreamResult result_;
  bool finished_ = false;
};

inline StreamResult generate(v1::Inference::Stub& stub, const v1::GenerateRequest& req,
                             milliseconds timeout = patience()) {
  OpenStream s(stub, req, timeout);
  s.finish();
  return s.result();
}

inline grpc::Status complete(v1::Inference::Stub& stub, const v1::GenerateRequest& req,
                             v1::CompleteResponse* out, milliseconds timeout = patience()) {
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout);
  return stub.Complete(&ctx, req, out);
}

inline grpc::Status get_model(v1::Inference::Stub& stub, const std::string& name,
                              v1::ModelInfo* out) {
  grpc::ClientContext ctx;
  set_deadline(ctx, seconds(kUnderSanitizer ? 60 : 10));
  v1::GetModelRequest req;
  req.set_model(name);
  return stub.GetModel(&ctx, req, out);
}

inline std::string describe_model(const v1::ModelInfo& m) {
  return "instances_busy=" + std::to_string(m.instances_busy()) +
         " queue_depth=" + std::to_string(m.queue_depth()) +
         " state=" + v1::ModelInfo::State_Name(m.state());
}

// Polls GetModel (back to back: each call is a real round trip to the server)
// until `pred` holds or `timeout` passes. *last gets the last answer.
inline bool wait_for_model(v1::Inference::Stub& stub, const std::string& name,
                           const std::function<bool(const v1::ModelInfo&)>& pred,
                           milliseconds timeout, v1::ModelInfo* last) {
  const auto deadline = Clock::now() + timeout;
  do {
    v1::ModelInfo m;
    const grpc::Status s = get_model(stub, name, &m);
    if (s.ok()) {
      *last = m;
      if (pred(m)) return true;
    }
  } while (Clock::now() < deadline);
  return false;
}

// --- Raw protobuf wire format, for services without C++ stubs here. --------

inline void put_varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
inline std::string pb_bytes_field(int field, const std::string& value) {
  std::string out;
  put_varint(out, (static_cast<std::uint64_t>(field) << 3) | 2);
  put_varint(out, value.size());
  return out + value;
}
inline grpc::ByteBuffer to_byte_buffer(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}
inline std::string from_byte_buffer(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!b.Dump(&slices).ok()) return out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// grpc.health.v1.HealthCheckResponse.ServingStatus
enum ServingStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };

// grpc.health.v1.Health/Check for `service`; *serving gets the answer's status.
inline grpc::Status health_check(const std::shared_ptr<grpc::Channel>& ch,
                                 const std::string& service, int* serving,
                                 milliseconds timeout = seconds(10)) {
  grpc::ClientContext ctx;
  set_deadline(ctx, kUnderSanitizer ? timeout * 4 : timeout);
  const grpc::ByteBuffer req = to_byte_buffer(pb_bytes_field(1, service));
  grpc::ByteBuffer resp;
  const grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check",
                                         grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::Status s = grpc::internal::BlockingUnaryCall(ch.get(), method, &ctx, req, &resp);
  *serving = -1;
  if (!s.ok()) return s;
  google::protobuf::UnknownFieldSet fields;
  if (!fields.ParseFromString(from_byte_buffer(resp)))
    return grpc::Status(grpc::StatusCode::INTERNAL, "unparsable HealthCheckResponse");
  *serving = kUnknown;  // proto3: an absent field is 0
  for (int i = 0; i < fields.field_count(); ++i) {
    if (fields.field(i).number() == 1 &&
        fields.field(i).type() == google::protobuf::UnknownField::TYPE_VARINT)
      *serving = static_cast<int>(fields.field(i).varint());
  }
  return s;
}

// Server reflection (grpc.reflection.v1alpha, what gRPC 1.51 serves): one
// request on a ServerReflectionInfo stream, its response's fields.
inline grpc::Status reflection_call(const std::shared_ptr<grpc::Channel>& ch,
                                    const std::string& request_bytes,
                                    google::protobuf::UnknownFieldSet* response) {
  grpc::ClientContext ctx;
  set_deadline(ctx, seconds(kUnderSanitizer ? 60 : 10));
  const grpc::internal::RpcMethod method(
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      grpc::internal::RpcMethod::BIDI_STREAMING);
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          ch.get(), method, &ctx));
  stream->Write(to_byte_buffer(request_bytes));
  stream->WritesDone();
  grpc::ByteBuffer resp;
  const bool got = stream->Read(&resp);
  while (stream->Read(&resp)) {
  }
  grpc::Status s = stream->Finish();
  if (!s.ok()) return s;
  if (!got) return grpc::Status(grpc::StatusCode::INTERNAL, "no reflection response");
  if (!response->ParseFromString(from_byte_buffer(resp)))
    return grpc::Status(grpc::StatusCode::INTERNAL, "unparsable reflection response");
  return s;
}

// The services reflection lists (ServerReflectionRequest.list_services = 7 ->
// ServerReflectionResponse.list_services_response = 6 -> service = 1 -> name = 1).
inline grpc::Status reflection_list_services(const std::shared_ptr<grpc::Channel>& ch,
                                             std::vector<std::string>* names) {
  google::protobuf::UnknownFieldSet resp;
  grpc::Status s = reflection_call(ch, pb_bytes_field(7, ""), &resp);
  if (!s.ok()) return s;
  for (int i = 0; i < resp.field_count(); ++i) {
    const auto& f = resp.field(i);
    if (f.number() != 6 || f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    google::protobuf::UnknownFieldSet list;
    list.ParseFromString(f.length_delimited());
    for (int j = 0; j < list.field_count(); ++j) {
      if (list.field(j).number() != 1) continue;
      google::protobuf::UnknownFieldSet service;
      service.ParseFromString(list.field(j).length_delimited());
      for (int k = 0; k < service.field_count(); ++k)
        if (service.field(k).number() == 1) names->push_back(service.field(k).length_delimited());
    }
  }
  return s;
}

// The file descriptors reflection returns for file_containing_symbol (= 4)
// (file_descriptor_response = 4 -> file_descriptor_proto = 1, repeated).
inline grpc::Status reflection_file_containing_symbol(
    const std::shared_ptr<grpc::Channel>& ch, const std::string& symbol,
    std::vector<google::protobuf::FileDescriptorProto>* files) {
  google::protobuf::UnknownFieldSet resp;
  grpc::Status s = reflection_call(ch, pb_bytes_field(4, symbol), &resp);
  if (!s.ok()) return s;
  for (int i = 0; i < resp.field_count(); ++i) {
    const auto& f = resp.field(i);
    if (f.number() != 4 || f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    google::protobuf::UnknownFieldSet fdr;
    fdr.ParseFromString(f.length_delimited());
    for (int j = 0; j < fdr.field_count(); ++j) {
      if (fdr.field(j).number() != 1) continue;
      google::protobuf::FileDescriptorProto fd;
      if (fd.ParseFromString(fdr.field(j).length_delimited())) files->push_back(fd);
    }
  }
  return s;
}

// --- Models. ---------------------------------------------------------------

// A directory removed when the test program exits.
inline const fs::path& scratch_dir() {
  struct Dir {
    fs::path path;
    Dir() {
      path = fs::temp_directory_path() / ("hearth_server_test_" + std::to_string(::getpid()));
      fs::remove_all(path);
      fs::create_directories(path);
    }
    ~Dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static Dir dir;
  return dir.path;
}

// `hearth-model synth FILE ARGS...`: the model file, made on first use and
// kept in the build tree's cache (HEARTH_TEST_MODEL_CACHE) for the other test
// programs (ctest runs every test as its own process); remade when
// hearth-model is newer than it. "" on failure (the failure is reported).
inline std::string synth_model(const std::string& name, const std::vector<std::string>& args) {
  std::string key = name;
  for (const std::string& a : args) key += (a.rfind("--", 0) == 0 ? "_" + a.substr(2) : "-" + a);
  const fs::path dir = HEARTH_TEST_MODEL_CACHE;
  const fs::path out = dir / (key + ".gguf");
  std::error_code ec;
  if (fs::exists(out, ec) &&
      fs::last_write_time(out, ec) >= fs::last_write_time(HEARTH_MODEL_BIN, ec))
    return out.string();
  fs::create_directories(dir, ec);
  // Written beside and renamed into place: concurrent tests never see half a file.
  const fs::path tmp = dir / (key + ".tmp" + std::to_string(::getpid()));
  std::vector<std::string> a = {"synth", tmp.string()};
  a.insert(a.end(), args.begin(), args.end());
  const ProcessResult r = run_process(HEARTH_MODEL_BIN, a);
  EXPECT_EQ(r.exit_code, 0) << "hearth-model synth failed: " << r.err;
  if (r.exit_code != 0) return "";
  fs::rename(tmp, out, ec);
  EXPECT_FALSE(ec) << "cannot rename " << tmp << " to " << out << ": " << ec.message();
  return ec ? "" : out.string();
}

// The shape of the built-in demo model (the synth defaults): fast.
inline std::string small_model() { return synth_model("small", {"--seed", "7"}); }

// A model slow enough (a few ms per token here; under TSan, whose slowdown
// does most of the work, a smaller one) that a long request outlasts every
// check a test makes while it runs. Nothing measures its speed: it only keeps
// generation going.
inline std::string slow_model() {
  if (kUnderTsan)
    return synth_model("slow", {"--dim", "512", "--layers", "8", "--ffn", "1408", "--vocab", "4096",
                                "--context", "4096"});
  return synth_model("slow", {"--dim", "768", "--layers", "12", "--heads", "12", "--ffn", "2048",
                              "--vocab", "4096", "--context", "4096"});
}

// Starts hearth-server expecting it to fail before it is ready. Returns its
// exit status (-1 if it became ready or never exited); *err gets its stderr.
inline int expect_startup_failure(const std::vector<std::string>& args, std::string* err) {
  ServerProcess server;
  const bool ready = server.start(HEARTH_SERVER_BIN, args);
  *err = server.stderr_text();
  EXPECT_FALSE(ready) << "the server started with bad arguments:\n" << server.describe();
  if (ready) return -1;
  const std::optional<int> code = server.wait_exit(patience());
  *err = server.stderr_text();
  EXPECT_TRUE(code.has_value()) << server.describe();
  return code.value_or(-1);
}

// Starts a server, failing the test (fatal) when it does not come up.
#define HEARTH_START_SERVER(server, args)                                       \
  do {                                                                          \
    ASSERT_TRUE((server).start(HEARTH_SERVER_BIN, (args))) << (server).error(); \
  } while (0)

}  // namespace hearth::testing
