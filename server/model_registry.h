// ModelRegistry: every model the server was configured with, by name, and
// where each one is in its life: LOADING -> SERVING -> DRAINING, or FAILED.
//
// Thread safety: `mu_` guards the entries' state and pool pointers. A pool,
// once published, lives as long as the registry, so callers may use the
// pointer find() returns without holding the lock.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/model_pool.h"
#include "server/model_spec.h"

namespace hearth::server {

enum class ModelState { kLoading, kServing, kDraining, kFailed };
const char* model_state_name(ModelState s);

struct ModelEntry {
  ModelSpec spec;
  ModelState state = ModelState::kLoading;
  std::string error;                // kFailed: why
  const ModelPool* pool = nullptr;  // set once loaded
};

// Whether `status` is a call's refusal because its model failed to load
// (FAILED_PRECONDITION; over HTTP a 500: the server's fault, lasting until
// a restart).
bool is_model_load_failure(const absl::Status& status);

class ModelRegistry {
 public:
  explicit ModelRegistry(std::vector<ModelSpec> specs);
  ~ModelRegistry();

  // Loads every model in order. Each one that loads becomes SERVING (and
  // `on_state` is told). When one fails it is FAILED with the error, and
  // load_all returns that error unless `keep_going` (serve the others).
  // `steps` (may be nullptr) hears of every batched step of every model.
  // Before each model, `stop_requested` (when set) is asked: true ends the
  // loading there (CANCELLED; the models not reached stay LOADING).
  absl::Status load_all(kernels::ThreadPool* kernel_pool, bool keep_going,
                        const std::function<void(const std::string&, ModelState)>& on_state,
                        StepObserver* steps = nullptr,
                        const std::function<bool()>& stop_requested = {});

  // The pool serving `name`. NOT_FOUND (listing the served names) for an
  // unknown name; UNAVAILABLE while loading or draining; FAILED_PRECONDITION
  // (is_model_load_failure) when it failed to load.
  absl::StatusOr<ModelPool*> find(const std::string& name) const;

  // Every model: drain its pool (no new requests) and mark it DRAINING.
  void drain_all();
  // Waits until every pool is idle or `deadline`; true if all are idle.
  bool wait_idle(Clock::time_point deadline) const;

  // A copy of the entry named `name`, in any state; NOT_FOUND as find().
  absl::StatusOr<ModelEntry> entry(const std::string& name) const;
  std::vector<ModelEntry> entries() const;
  std::vector<ModelPool*> pools() const;

 private:
  absl::Status not_found(const std::string& name) const;  // requires mu_

  mutable std::mutex mu_;
  std::vector<ModelEntry> entries_;                // guarded by mu_ (state, error, pool)
  std::vector<std::unique_ptr<ModelPool>> owned_;  // guarded by mu_; append-only
};

}  // namespace hearth::server
