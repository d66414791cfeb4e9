// Connecting the hearth client to a server: the channel (plaintext or TLS),
// per-call contexts (deadline, bearer token), health checks and error text.
//
// This header names gRPC types only by declaration, so code that uses the
// plain structs below (and the unit tests) needs no gRPC include paths.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace grpc {
class Channel;
class ClientContext;
class Status;
}  // namespace grpc

namespace hearth {
class Flags;
}

namespace hearth::client {

struct ConnectionOptions {
  std::string server = "localhost:50051";
  // TLS: `tls_ca_file` set: trust that root certificate (PEM); else `tls`:
  // the system's roots. Neither: plaintext.
  std::string tls_ca_file;
  bool tls = false;
  // Sent as "authorization: Bearer <token>" on every call when not empty.
  std::string auth_token;
  // Deadline of each request; 0: none.
  double timeout_s = 0;
};

// The flags every subcommand accepts (value flags, then boolean flags), and
// their help text.
inline constexpr const char* kConnectionValueFlags[] = {"server", "tls-ca", "auth-token",
                                                        "timeout-s"};
inline constexpr const char* kConnectionBoolFlags[] = {"tls"};
inline constexpr const char* kConnectionUsage =
    R"(connection options (every subcommand):
  --server ADDR           server address (default localhost:50051)
  --tls                   use TLS with the system's root certificates
  --tls-ca FILE           use TLS, trusting this root certificate (PEM)
  --auth-token TOKEN      bearer token (default: $HEARTH_AUTH_TOKEN)
  --timeout-s S           deadline of each request in seconds (default: none;
                          models and health: 10)
)";

// Reads the connection flags (and HEARTH_AUTH_TOKEN when --auth-token is not
// given). `default_timeout_s` applies when --timeout-s is absent. Errors are
// InvalidArgument with a message naming the flag.
absl::StatusOr<ConnectionOptions> connection_options_from_flags(hearth::Flags& flags,
                                                                double default_timeout_s);

// A channel to `options.server`. Fails only on local problems (an unreadable
// CA file); an unreachable server shows up as UNAVAILABLE on the first call.
absl::StatusOr<std::shared_ptr<grpc::Channel>> make_channel(const ConnectionOptions& options);

// Sets the bearer token and, when `timeout_s` > 0, the deadline.
void prepare_context(grpc::ClientContext* context, const ConnectionOptions& options);
void prepare_context(grpc::ClientContext* context, const ConnectionOptions& options,
                     double timeout_s);

// "OK", "CANCELLED", ..., "UNAUTHENTICATED"; "UNKNOWN_CODE" outside [0, 16].
const char* status_code_name(int code);

// "hearth: <rpc> failed: <CODE>: <message>"
std::string rpc_error(std::string_view rpc, const grpc::Status& status);

// grpc.health.v1.Health/Check, called generically (Debian ships no
// health.proto): returns the serving status of `service` ("" = the whole
// server), or the RPC's failure as a Status with the same code.
enum class HealthStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };
const char* health_status_name(HealthStatus s);
absl::StatusOr<HealthStatus> check_health(const std::shared_ptr<grpc::Channel>& channel,
                                          const ConnectionOptions& options,
                                          const std::string& service);

// grpc::Status -> absl::Status with the same code and message.
absl::Status to_absl(const grpc::Status& status);

}  // namespace hearth::client
