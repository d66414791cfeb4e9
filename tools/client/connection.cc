#include "tools/client/connection.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/byte_buffer.h>

#include <climits>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <vector>

#include "base/cli_flags.h"
#include "base/read_file.h"
#include "base/status_macros.h"
#include "base/str_cat.h"

namespace hearth::client {

absl::StatusOr<ConnectionOptions> connection_options_from_flags(hearth::Flags& flags,
                                                                double default_timeout_s) {
  ConnectionOptions o;
  o.server = flags.get("server", o.server);
  if (o.server.empty()) return absl::InvalidArgumentError("--server: empty address");
  o.tls_ca_file = flags.get("tls-ca");
  if (flags.has("tls-ca") && o.tls_ca_file.empty())
    return absl::InvalidArgumentError("--tls-ca: empty file name");
  o.tls = flags.get_bool("tls").value_or(false) || !o.tls_ca_file.empty();
  if (flags.has("auth-token")) {
    o.auth_token = flags.get("auth-token");
    if (o.auth_token.empty()) return absl::InvalidArgumentError("--auth-token: empty token");
  } else if (const char* env = std::getenv("HEARTH_AUTH_TOKEN"); env != nullptr) {
    o.auth_token = env;
  }
  o.timeout_s = default_timeout_s;
  if (!flags.get_float("timeout-s", 0, 1e7, &o.timeout_s))
    return absl::InvalidArgumentError(flags.error_detail());  // the caller names the tool
  return o;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> make_channel(const ConnectionOptions& options) {
  std::shared_ptr<grpc::ChannelCredentials> creds;
  if (!options.tls_ca_file.empty()) {
    absl::StatusOr<std::string> pem = read_whole_file(options.tls_ca_file);
    if (!pem.ok())
      return absl::Status(pem.status().code(), str_cat("--tls-ca: ", pem.status().message()));
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = std::move(*pem);
    if (ssl.pem_root_certs.find("-----BEGIN CERTIFICATE-----") == std::string::npos)
      return absl::InvalidArgumentError("--tls-ca: '" + options.tls_ca_file +
                                        "' holds no PEM certificate");
    creds = grpc::SslCredentials(ssl);
  } else if (options.tls) {
    creds = grpc::SslCredentials(grpc::SslCredentialsOptions());
  } else {
    creds = grpc::InsecureChannelCredentials();
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(INT_MAX);
  // The bench opens many concurrent streams; one connection multiplexes them.
  return grpc::CreateCustomChannel(options.server, creds, args);
}

void prepare_context(grpc::ClientContext* context, const ConnectionOptions& options,
                     double timeout_s) {
  if (!options.auth_token.empty())
    context->AddMetadata("authorization", "Bearer " + options.auth_token);
  if (timeout_s > 0)
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(
                              std::chrono::duration<double>(timeout_s)));
}

void prepare_context(grpc::ClientContext* context, const ConnectionOptions& options) {
  prepare_context(context, options, options.timeout_s);
}

const char* status_code_name(int code) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  if (code >= 0 && code < static_cast<int>(std::size(kNames))) return kNames[code];
  return "UNKNOWN_CODE";
}

std::string rpc_error(std::string_view rpc, const grpc::Status& status) {
  return "hearth: " + std::string(rpc) + " failed: " + status_code_name(status.error_code()) +
         ": " + status.error_message();
}

absl::Status to_absl(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

const char* health_status_name(HealthStatus s) {
  switch (s) {
    case HealthStatus::kServing:
      return "SERVING";
    case HealthStatus::kNotServing:
      return "NOT_SERVING";
    case HealthStatus::kServiceUnknown:
      return "SERVICE_UNKNOWN";
    case HealthStatus::kUnknown:
      break;
  }
  return "UNKNOWN";
}

namespace {

// Protobuf wire format, just enough for grpc.health.v1:
//   HealthCheckRequest  { string service = 1; }
//   HealthCheckResponse { ServingStatus status = 1; }  (enum: varint)
void put_varint(std::string* out, std::uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

bool get_varint(const std::string& in, std::size_t* pos, std::uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && *pos < in.size(); shift += 7) {
    const auto b = static_cast<unsigned char>(in[(*pos)++]);
    *v |= static_cast<std::uint64_t>(b & 0x7F) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// The `status` field of a HealthCheckResponse (0 when absent, as proto3 says).
absl::StatusOr<std::uint64_t> parse_health_response(const std::string& bytes) {
  std::uint64_t status = 0;
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    std::uint64_t key = 0, v = 0;
    if (!get_varint(bytes, &pos, &key)) break;
    const std::uint64_t field = key >> 3, wire = key & 7;
    bool ok = true;
    switch (wire) {
      case 0:
        ok = get_varint(bytes, &pos, &v);
        if (ok && field == 1) status = v;
        break;
      case 1:
        pos += 8;
        break;
      case 2:
        ok = get_varint(bytes, &pos, &v) && v <= bytes.size() - std::min(pos, bytes.size());
        pos += v;
        break;
      case 5:
        pos += 4;
        break;
      default:
        ok = false;
    }
    if (!ok || pos > bytes.size())
      return absl::DataLossError("malformed grpc.health.v1.HealthCheckResponse");
  }
  return status;
}

}  // namespace

absl::StatusOr<HealthStatus> check_health(const std::shared_ptr<grpc::Channel>& channel,
                                          const ConnectionOptions& options,
                                          const std::string& service) {
  std::string request_bytes;
  if (!service.empty()) {
    request_bytes.push_back(0x0A);  // field 1, length-delimited
    put_varint(&request_bytes, service.size());
    request_bytes += service;
  }
  grpc::Slice slice(request_bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  grpc::ClientContext context;
  prepare_context(&context, options);
  grpc::GenericStub stub(channel);
  // Shared with the callback, which may still be returning from set_value()
  // when get() wakes up.
  auto done = std::make_shared<std::promise<grpc::Status>>();
  auto finished = done->get_future();
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [done](grpc::Status s) { done->set_value(std::move(s)); });
  const grpc::Status status = finished.get();
  if (!status.ok()) return to_absl(status);
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok())
    return absl::DataLossError("cannot read the grpc.health.v1.HealthCheckResponse");
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  HEARTH_ASSIGN_OR_RETURN(auto value, parse_health_response(bytes));
  switch (value) {
    case 1:
      return HealthStatus::kServing;
    case 2:
      return HealthStatus::kNotServing;
    case 3:
      return HealthStatus::kServiceUnknown;
    default:
      return HealthStatus::kUnknown;
  }
}

}  // namespace hearth::client
