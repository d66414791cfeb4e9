// Helpers of the reliability tests (soak, faults, hostile inputs), on top of
// the server tests' helpers (tests/server/test_util.h, and
// tests/server/metrics_scrape.h for /metrics): the resident memory of a
// process, generic calls that send hand-encoded request bytes (for requests
// the generated code would not produce, such as invalid UTF-8 in proto3
// strings), channels that reconnect quickly, and channels whose unread
// streams stall. (The batching tests in tests/server use them too.)
//
// Nothing here sleeps: every wait is a poll() or an RPC with a deadline.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tests/server/metrics_scrape.h"
#include "tools/client/connection.h"

namespace hearth::testing {

// --- processes ---------------------------------------------------------------

// VmRSS of `pid` in bytes (from /proc/PID/status), or 0 when unreadable.
inline std::uint64_t resident_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;
  }
  return 0;
}

// A channel that redials quickly after the server went away (for restarts).
inline std::shared_ptr<grpc::Channel> fast_reconnect_channel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 200);
  static std::atomic<int> counter{0};
  args.SetInt("hearth.test.reliability_channel", counter++);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// A channel whose streams take little data before their reader must read: a
// small HTTP/2 stream window and no BDP probing (which would grow it). A
// Generate stream on it that the test does not read stops generating after
// about 130 short pieces (measured on stories260K and the demo model: about
// 65 in flight in the 1 KiB window, then its PieceWriter's ring of 64): the
// server holds it, unfinished, on its instance until the test reads. Each
// call makes its own connection.
inline std::shared_ptr<grpc::Channel> stalling_channel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 1024);
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  static std::atomic<int> counter{0};
  args.SetInt("hearth.test.stalling_channel", counter++);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// --- hand-encoded requests ---------------------------------------------------

inline std::string pb_varint_field(int field, std::uint64_t value) {
  std::string out;
  put_varint(out, static_cast<std::uint64_t>(field) << 3);
  put_varint(out, value);
  return out;
}

// A unary hearth.v1 call (`method`, e.g. "Complete") with raw request bytes;
// *response gets the raw response bytes.
inline grpc::Status raw_unary(const std::shared_ptr<grpc::Channel>& ch, const std::string& method,
                              const std::string& request, std::string* response,
                              milliseconds timeout = patience()) {
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout);
  const std::string path = "/hearth.v1.Inference/" + method;
  const grpc::internal::RpcMethod rpc(path.c_str(), grpc::internal::RpcMethod::NORMAL_RPC);
  grpc::ByteBuffer resp;
  grpc::Status s =
      grpc::internal::BlockingUnaryCall(ch.get(), rpc, &ctx, to_byte_buffer(request), &resp);
  if (response != nullptr) *response = s.ok() ? from_byte_buffer(resp) : std::string();
  return s;
}

// hearth.v1.Inference/Generate with raw request bytes: the final status, and
// the number of messages received in *messages.
inline grpc::Status raw_generate(const std::shared_ptr<grpc::Channel>& ch,
                                 const std::string& request, int* messages,
                                 milliseconds timeout = patience()) {
  grpc::ClientContext ctx;
  set_deadline(ctx, timeout);
  const grpc::internal::RpcMethod rpc("/hearth.v1.Inference/Generate",
                                      grpc::internal::RpcMethod::SERVER_STREAMING);
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(ch.get(), rpc, &ctx,
                                                                    to_byte_buffer(request)));
  grpc::ByteBuffer msg;
  *messages = 0;
  while (reader->Read(&msg)) ++*messages;
  return reader->Finish();
}

inline std::string code_name(grpc::StatusCode code) {
  return client::status_code_name(static_cast<int>(code));
}

inline std::string describe_status(const grpc::Status& s) {
  return code_name(s.error_code()) + " '" + s.error_message() + "'";
}

}  // namespace hearth::testing
