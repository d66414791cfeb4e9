#include "server/inference_service.h"

#include <chrono>
#include <cmath>
#include <functional>
#include <optional>

#include "base/status_macros.h"
#include "base/str_cat.h"
#include "engine/generation.h"
#include "engine/unicode.h"
#include "server/bearer_auth.h"
#include "server/chat_call.h"
#include "server/invalid_argument.h"
#include "server/request_validation.h"

namespace hearth::server {
namespace {

using hearth::v1::FinishReason;

grpc::Status to_grpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// The call's deadline on the steady clock (gRPC gives it on the system clock).
Clock::time_point steady_deadline(const grpc::ServerContext& context) {
  const auto remaining = context.deadline() - std::chrono::system_clock::now();
  if (remaining > std::chrono::hours(24 * 365)) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(remaining);
}

FinishReason to_proto(engine::FinishReason r) {
  switch (r) {
    case engine::FinishReason::kEos:
      return hearth::v1::FINISH_REASON_EOS;
    case engine::FinishReason::kStopString:
      return hearth::v1::FINISH_REASON_STOP;
    case engine::FinishReason::kMaxTokens:
      return hearth::v1::FINISH_REASON_LENGTH;
    case engine::FinishReason::kContextLimit:
      return hearth::v1::FINISH_REASON_CONTEXT_LIMIT;
    case engine::FinishReason::kCancelled:
      break;
  }
  return hearth::v1::FINISH_REASON_UNSPECIFIED;
}

std::string to_bytes(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string bytes;
  if (buffer.Dump(&slices).ok())
    for (const grpc::Slice& sl : slices)
      bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  return bytes;
}

// A unary method whose request bytes hearth parses itself (see
// parse_request), then hands to the generated-style `method`.
template <typename Request, typename Response>
grpc::internal::MethodHandler* parsing_unary(
    InferenceService* self,
    grpc::Status (InferenceService::*method)(grpc::ServerContext*, const Request*, Response*)) {
  return new grpc::internal::StreamedUnaryHandler<grpc::ByteBuffer, Response>(
      [self, method](grpc::ServerContext* context,
                     grpc::ServerUnaryStreamer<grpc::ByteBuffer, Response>* stream) {
        grpc::ByteBuffer bytes;
        if (!stream->Read(&bytes))
          return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request: no message received");
        Request request;
        if (absl::Status s = parse_request(to_bytes(bytes), request); !s.ok()) return to_grpc(s);
        Response response;
        grpc::Status status = (self->*method)(context, &request, &response);
        if (status.ok() && !stream->Write(response))
          return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
        return status;
      });
}

void to_proto(const engine::TokenLogprob& t, const engine::Tokenizer& tokenizer,
              hearth::v1::TokenLogprob* out) {
  const std::string raw = tokenizer.token_text(t.id);
  out->set_token_id(t.id);
  out->set_text(engine::sanitize_utf8(raw));
  out->set_raw(raw);
  out->set_logprob(t.logprob);
}

void to_proto(const PieceLogprobs& logprobs, hearth::v1::TokenLogprobs* out) {
  to_proto(logprobs.values.chosen, logprobs.tokenizer, out->mutable_chosen());
  out->clear_top();
  for (const engine::TokenLogprob& t : logprobs.values.alternatives())
    to_proto(t, logprobs.tokenizer, out->add_top());
}

// A Complete call's pieces, gathered into its one response.
class CompleteSink final : public PieceSink {
 public:
  explicit CompleteSink(hearth::v1::CompleteResponse& response) : response_(response) {}
  bool has_room(std::size_t) const override { return true; }
  void piece(std::string_view text, std::int32_t token, const PieceLogprobs* logprobs) override {
    response_.mutable_text()->append(text.data(), text.size());
    if (token >= 0) response_.add_token_ids(token);
    if (logprobs != nullptr) to_proto(*logprobs, response_.add_logprobs());
  }
  bool failed() const override { return false; }

 private:
  hearth::v1::CompleteResponse& response_;
};

// A generation call parsed and mapped, ready to start on the request path.
struct Call {
  GenerateCall generate;  // Generate, Complete
  ChatCall chat;          // Chat, ChatComplete
  bool is_chat = false;
  bool echo_prompt_ids = false;
};

// Parses `request_bytes` as the method's request message into `call`.
absl::Status prepare(const grpc::ByteBuffer& request_bytes, std::size_t limit, Call& call) {
  if (call.is_chat) {
    hearth::v1::ChatRequest request;
    HEARTH_RETURN_IF_ERROR(parse_request(to_bytes(request_bytes), request));
    call.echo_prompt_ids = request.echo_prompt_ids();
    return map_chat_request(request, limit, call.chat);
  }
  hearth::v1::GenerateRequest request;
  HEARTH_RETURN_IF_ERROR(parse_request(to_bytes(request_bytes), request));
  call.echo_prompt_ids = request.echo_prompt_ids();
  call.generate.model = request.model();
  call.generate.reuse_prefix = !request.disable_prefix_reuse();
  return map_generation_request(request, limit, call.generate.request);
}

}  // namespace

InferenceService::InferenceService(RequestPath& path, ServiceOptions options)
    : registry_(path.registry()), options_(std::move(options)), path_(path) {
  // Method indices follow the order of the rpcs in inference.proto.
  MarkMethodStreamed(0,
                     new grpc::internal::SplitServerStreamingHandler<grpc::ByteBuffer,
                                                                     hearth::v1::GenerateResponse>(
                         [this](grpc::ServerContext* c, GenerateStream* s) {
                           return streamed(c, s, "Generate");
                         }));
  MarkMethodStreamed(
      1,
      new grpc::internal::StreamedUnaryHandler<grpc::ByteBuffer, hearth::v1::CompleteResponse>(
          [this](grpc::ServerContext* c, CompleteStream* s) { return unary(c, s, "Complete"); }));
  MarkMethodStreamed(2, parsing_unary(this, &InferenceService::Tokenize));
  MarkMethodStreamed(3, parsing_unary(this, &InferenceService::Detokenize));
  MarkMethodStreamed(4, parsing_unary(this, &InferenceService::ListModels));
  MarkMethodStreamed(5, parsing_unary(this, &InferenceService::GetModel));
  MarkMethodStreamed(
      6, new grpc::internal::SplitServerStreamingHandler<grpc::ByteBuffer,
                                                         hearth::v1::GenerateResponse>(
             [this](grpc::ServerContext* c, GenerateStream* s) { return streamed(c, s, "Chat"); }));
  MarkMethodStreamed(
      7, new grpc::internal::StreamedUnaryHandler<grpc::ByteBuffer, hearth::v1::CompleteResponse>(
             [this](grpc::ServerContext* c, CompleteStream* s) {
               return unary(c, s, "ChatComplete");
             }));
}

grpc::Status InferenceService::check_auth(const grpc::ServerContext& context) const {
  std::optional<std::string_view> authorization;
  const auto& md = context.client_metadata();
  if (const auto it = md.find("authorization"); it != md.end())
    authorization = std::string_view(it->second.data(), it->second.size());
  return to_grpc(check_bearer(authorization, options_.auth_token));
}

grpc::Status InferenceService::run(grpc::ServerContext* context,
                                   const grpc::ByteBuffer& request_bytes, const char* method,
                                   GenerateStream* writer, CompleteStream* complete) {
  CallsInFlight::Scope in_flight(calls_);
  RequestRecord record;
  record.method = method;
  auto finish = [&](grpc::Status status) {
    path_.finish(record, absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                                      status.error_message()));
    return status;
  };
  if (grpc::Status s = check_auth(*context); !s.ok()) return finish(s);
  Call call;
  call.is_chat = std::string_view(method).starts_with("Chat");
  if (absl::Status s = prepare(request_bytes, path_.options().max_tokens_limit, call); !s.ok())
    return finish(to_grpc(s));
  call.generate.method = call.chat.method = method;

  CallContext call_context;
  call_context.deadline = steady_deadline(*context);
  call_context.cancelled = [context] { return context->IsCancelled(); };

  // Generate: pieces go out through a PieceWriter's thread; Complete
  // gathers them into the response.
  std::optional<PieceWriterPool::Borrowed> piece_writer;
  std::optional<PieceWriterSink> stream_sink;
  std::optional<CompleteSink> complete_sink;
  hearth::v1::CompleteResponse complete_msg;
  PieceSink* sink = nullptr;
  if (writer != nullptr) {
    piece_writer.emplace(writers_.take());
    hearth::v1::GenerateResponse piece_msg;  // reused: keeps its text's capacity
    (*piece_writer)
        ->begin([writer, piece_msg](std::string_view text, std::int32_t token,
                                    const PieceLogprobs* logprobs) mutable {
          hearth::v1::Piece* piece = piece_msg.mutable_piece();
          piece->set_text(text.data(), text.size());
          piece->set_token_id(token);
          if (logprobs != nullptr)
            to_proto(*logprobs, piece->mutable_logprobs());
          else
            piece->clear_logprobs();
          return writer->Write(piece_msg);
        });
    sink = &stream_sink.emplace(**piece_writer);
  } else {
    sink = &complete_sink.emplace(complete_msg);
  }
  absl::StatusOr<GenerateOutcome> outcome =
      call.is_chat ? path_.chat(call.chat, *sink, call_context, record)
                   : path_.generate(call.generate, *sink, call_context, record);
  // Every piece is out (or the stream is gone, and Done's write will fail)
  // before the status or Done.
  if (piece_writer) (*piece_writer)->finish();
  if (!outcome.ok()) return finish(to_grpc(outcome.status()));

  hearth::v1::Done done;
  done.set_finish_reason(to_proto(outcome->finish));
  done.set_instance(static_cast<std::uint32_t>(outcome->instance));
  hearth::v1::Usage* usage = done.mutable_usage();
  usage->set_prompt_tokens(static_cast<std::uint32_t>(outcome->prompt_ids.size()));
  usage->set_generated_tokens(static_cast<std::uint32_t>(outcome->generated_tokens));
  usage->set_cached_tokens(static_cast<std::uint32_t>(outcome->cached_tokens));
  if (call.echo_prompt_ids)
    for (std::int32_t id : outcome->prompt_ids) usage->add_prompt_ids(id);
  hearth::v1::Timings* t = done.mutable_timings();
  t->set_queue_s(outcome->queue_s);
  t->set_time_to_first_token_s(outcome->time_to_first_token_s);
  t->set_prefill_tokens_per_s(outcome->prefill_tokens_per_s);
  t->set_decode_tokens_per_s(outcome->decode_tokens_per_s);
  t->set_total_s(outcome->total_s);
  bool written = false;
  if (complete != nullptr) {
    *complete_msg.mutable_done() = std::move(done);
    written = complete->Write(complete_msg);
  } else {
    hearth::v1::GenerateResponse last;
    *last.mutable_done() = std::move(done);
    written = writer->Write(last);
  }
  if (!written) return finish(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
  return finish(grpc::Status::OK);
}

grpc::Status InferenceService::observed(const char* method, const std::string& model,
                                        const std::function<grpc::Status()>& body) {
  CallsInFlight::Scope in_flight(calls_);
  RequestRecord record;
  record.method = method;
  grpc::Status status = body();
  if (!model.empty() && registry_.find(model).ok()) record.model = model;
  path_.finish(record, absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                                    status.error_message()));
  return status;
}

grpc::Status InferenceService::Tokenize(grpc::ServerContext* context,
                                        const hearth::v1::TokenizeRequest* request,
                                        hearth::v1::TokenizeResponse* response) {
  return observed("Tokenize", request->model(),
                  [&] { return answer_tokenize(context, request, response); });
}

grpc::Status InferenceService::Detokenize(grpc::ServerContext* context,
                                          const hearth::v1::DetokenizeRequest* request,
                                          hearth::v1::DetokenizeResponse* response) {
  return observed("Detokenize", request->model(),
                  [&] { return answer_detokenize(context, request, response); });
}

grpc::Status InferenceService::ListModels(grpc::ServerContext* context,
                                          const hearth::v1::ListModelsRequest* request,
                                          hearth::v1::ListModelsResponse* response) {
  return observed("ListModels", "", [&] { return answer_list_models(context, request, response); });
}

grpc::Status InferenceService::GetModel(grpc::ServerContext* context,
                                        const hearth::v1::GetModelRequest* request,
                                        hearth::v1::ModelInfo* response) {
  return observed("GetModel", request->model(),
                  [&] { return answer_get_model(context, request, response); });
}

grpc::Status InferenceService::streamed(grpc::ServerContext* context, GenerateStream* stream,
                                        const char* method) {
  grpc::ByteBuffer request;
  if (!stream->Read(&request))
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request: no message received");
  return run(context, request, method, stream, nullptr);
}

grpc::Status InferenceService::unary(grpc::ServerContext* context, CompleteStream* stream,
                                     const char* method) {
  grpc::ByteBuffer request;
  if (!stream->Read(&request))
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "request: no message received");
  return run(context, request, method, nullptr, stream);
}

grpc::Status InferenceService::answer_tokenize(grpc::ServerContext* context,
                                               const hearth::v1::TokenizeRequest* request,
                                               hearth::v1::TokenizeResponse* response) {
  if (grpc::Status s = check_auth(*context); !s.ok()) return s;
  absl::StatusOr<ModelPool*> pool = registry_.find(request->model());
  if (!pool.ok()) return to_grpc(pool.status());
  engine::TokenizeOptions options;
  if (request->has_add_bos()) options.add_bos = request->add_bos();
  options.parse_special = request->parse_special();
  const engine::Tokenizer& tok = (*pool)->tokenizer();
  absl::StatusOr<std::vector<std::int32_t>> ids = tok.encode(request->text(), options);
  if (!ids.ok()) return to_grpc(invalid(str_cat("text: ", ids.status().message())));
  for (std::int32_t id : *ids) {
    response->add_token_ids(id);
    // A proto string must be UTF-8: a vocabulary entry that is not (a
    // hostile or broken file) would make the whole response unsendable.
    response->add_pieces(engine::sanitize_utf8(tok.piece(id)));
  }
  return grpc::Status::OK;
}

grpc::Status InferenceService::answer_detokenize(grpc::ServerContext* context,
                                                 const hearth::v1::DetokenizeRequest* request,
                                                 hearth::v1::DetokenizeResponse* response) {
  if (grpc::Status s = check_auth(*context); !s.ok()) return s;
  absl::StatusOr<ModelPool*> pool = registry_.find(request->model());
  if (!pool.ok()) return to_grpc(pool.status());
  const engine::Tokenizer& tok = (*pool)->tokenizer();
  const auto vocab = static_cast<std::int64_t>(tok.vocab_size());
  for (int i = 0; i < request->token_ids_size(); ++i) {
    const std::int32_t id = request->token_ids(i);
    if (id < 0 || id >= vocab)
      return to_grpc(invalid(
          str_cat("token_ids[", i, "]: ", id, " is outside the vocabulary [0, ", vocab, ")")));
  }
  const std::vector<std::int32_t> ids(request->token_ids().begin(), request->token_ids().end());
  // A proto string must be well-formed UTF-8 (the response would not even be
  // sent): ids cut inside a character (a lone byte token) give U+FFFD, as
  // streamed text does.
  response->set_text(engine::sanitize_utf8(tok.decode(ids)));
  return grpc::Status::OK;
}

void fill_model_info(const ModelEntry& entry, hearth::v1::ModelInfo& info) {
  using hearth::v1::ModelInfo;
  info.set_name(entry.spec.name);
  // Proto strings must be UTF-8: a path or error that is not would make the
  // whole ListModels response unsendable for every client.
  info.set_source(engine::sanitize_utf8(entry.spec.path));
  info.set_demo(entry.spec.is_demo());
  info.set_queue_capacity(static_cast<std::uint32_t>(entry.spec.queue));
  info.set_kv_cache_type(engine::kv_cache_type_name(entry.spec.kv_cache));
  switch (entry.state) {
    case ModelState::kLoading:
      info.set_state(ModelInfo::STATE_LOADING);
      break;
    case ModelState::kServing:
      info.set_state(ModelInfo::STATE_SERVING);
      break;
    case ModelState::kDraining:
      info.set_state(ModelInfo::STATE_DRAINING);
      break;
    case ModelState::kFailed:
      info.set_state(ModelInfo::STATE_FAILED);
      break;
  }
  info.set_error(engine::sanitize_utf8(entry.error));
  if (entry.pool == nullptr) return;
  const ModelPool& pool = *entry.pool;
  const engine::ModelConfig& c = pool.weights().config();
  info.set_architecture(c.arch_name);
  info.set_parameters(pool.parameters());
  info.set_quantization(pool.weights().quantization());
  info.set_context_length(static_cast<std::uint32_t>(pool.context_length()));
  info.set_vocab_size(static_cast<std::uint32_t>(pool.tokenizer().vocab_size()));
  const PoolCounters n = pool.counters();
  info.set_instances(static_cast<std::uint32_t>(n.instances));
  info.set_instances_busy(static_cast<std::uint32_t>(n.busy));
  info.set_queue_depth(static_cast<std::uint32_t>(n.queue_depth));
}

grpc::Status InferenceService::answer_list_models(grpc::ServerContext* context,
                                                  const hearth::v1::ListModelsRequest* /*request*/,
                                                  hearth::v1::ListModelsResponse* response) {
  if (grpc::Status s = check_auth(*context); !s.ok()) return s;
  for (const ModelEntry& e : registry_.entries()) fill_model_info(e, *response->add_models());
  return grpc::Status::OK;
}

grpc::Status InferenceService::answer_get_model(grpc::ServerContext* context,
                                                const hearth::v1::GetModelRequest* request,
                                                hearth::v1::ModelInfo* response) {
  if (grpc::Status s = check_auth(*context); !s.ok()) return s;
  absl::StatusOr<ModelEntry> entry = registry_.entry(request->model());
  if (!entry.ok()) return to_grpc(entry.status());
  fill_model_info(*entry, *response);
  return grpc::Status::OK;
}

}  // namespace hearth::server
