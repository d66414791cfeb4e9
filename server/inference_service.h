// The hearth.v1.Inference gRPC service (proto/hearth/v1/inference.proto).
//
// A thin adapter over the transport-neutral RequestPath
// (server/request_path.h): Generate and Complete parse the request bytes,
// map the proto to plain values, and hand them to the path with a sink for
// the pieces and the call's context (deadline, IsCancelled); the path
// validates, admits, and runs the generation in the model's step loop.
// Threads: the synchronous gRPC server runs each call on one of its worker
// threads, start to finish; it waits in RequestPath::generate while the
// model's step loop thread steps the sequence. A Generate stream's pieces
// are written by a PieceWriter's thread (server/piece_writer.h), so the step
// loop never waits for a Write; a stream whose queue is full sits out steps.
//
// Cancellation is checked before every step: client cancellation or
// disconnect, the call's deadline, a failed write (the stream is gone), and
// the server's abort (grace period over).
//
// Auth: with a bearer token configured, every hearth.v1 call must carry
// metadata "authorization: Bearer <token>" (compared in constant time);
// health and reflection are separate services and stay open for probes.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <string>

#include "hearth/v1/inference.grpc.pb.h"
#include "server/calls_in_flight.h"
#include "server/model_registry.h"
#include "server/piece_writer.h"
#include "server/request_observer.h"
#include "server/request_path.h"

namespace hearth::server {

struct ServiceOptions {
  std::string auth_token;  // empty: no auth
  std::size_t max_tokens_limit = 4096;
};

class InferenceService final : public hearth::v1::Inference::Service {
 public:
  // `path` (validation, admission, generation, records; shared with the
  // other front ends) outlives the service.
  InferenceService(RequestPath& path, ServiceOptions options);

  // The hearth.v1 calls whose handlers are running (the drain waits for
  // them before gRPC's Shutdown(): server/calls_in_flight.h).
  CallsInFlight& calls_in_flight() { return calls_; }

  // Every method is registered with a raw-bytes request handler (see the
  // constructor): hearth parses requests itself, so one that gRPC's parser
  // would refuse with a bare INTERNAL gets an InvalidArgument naming the
  // field instead. The overrides below run after that parse.
  grpc::Status Tokenize(grpc::ServerContext* context, const hearth::v1::TokenizeRequest* request,
                        hearth::v1::TokenizeResponse* response) override;
  grpc::Status Detokenize(grpc::ServerContext* context,
                          const hearth::v1::DetokenizeRequest* request,
                          hearth::v1::DetokenizeResponse* response) override;
  grpc::Status ListModels(grpc::ServerContext* context,
                          const hearth::v1::ListModelsRequest* request,
                          hearth::v1::ListModelsResponse* response) override;
  grpc::Status GetModel(grpc::ServerContext* context, const hearth::v1::GetModelRequest* request,
                        hearth::v1::ModelInfo* response) override;

 private:
  grpc::Status check_auth(const grpc::ServerContext& context) const;
  // Runs `body` and tells the observer (through the path) how the call ended.
  grpc::Status observed(const char* method, const std::string& model,
                        const std::function<grpc::Status()>& body);
  // The unary methods' answers, which the public methods run through
  // observed() so that each call is counted once, whatever it returns.
  grpc::Status answer_tokenize(grpc::ServerContext* context,
                               const hearth::v1::TokenizeRequest* request,
                               hearth::v1::TokenizeResponse* response);
  grpc::Status answer_detokenize(grpc::ServerContext* context,
                                 const hearth::v1::DetokenizeRequest* request,
                                 hearth::v1::DetokenizeResponse* response);
  grpc::Status answer_list_models(grpc::ServerContext* context,
                                  const hearth::v1::ListModelsRequest* request,
                                  hearth::v1::ListModelsResponse* response);
  grpc::Status answer_get_model(grpc::ServerContext* context,
                                const hearth::v1::GetModelRequest* request,
                                hearth::v1::ModelInfo* response);
  using GenerateStream = grpc::ServerSplitStreamer<grpc::ByteBuffer, hearth::v1::GenerateResponse>;
  using CompleteStream = grpc::ServerUnaryStreamer<grpc::ByteBuffer, hearth::v1::CompleteResponse>;
  // Generate and Chat (streamed); Complete and ChatComplete (unary).
  grpc::Status streamed(grpc::ServerContext* context, GenerateStream* stream, const char* method);
  grpc::Status unary(grpc::ServerContext* context, CompleteStream* stream, const char* method);
  // One generation; `stream` (Generate, Chat) or `complete` (Complete,
  // ChatComplete) gets the output. The call is recorded with the status the
  // client gets, a failed last write included.
  grpc::Status run(grpc::ServerContext* context, const grpc::ByteBuffer& request_bytes,
                   const char* method, GenerateStream* stream, CompleteStream* complete);

  ModelRegistry& registry_;
  const ServiceOptions options_;
  RequestPath& path_;
  PieceWriterPool writers_;  // Generate streams' writer threads
  CallsInFlight calls_;
};

// Fills `info` from the registry entry (and its pool's live counters).
void fill_model_info(const ModelEntry& entry, hearth::v1::ModelInfo& info);

}  // namespace hearth::server
