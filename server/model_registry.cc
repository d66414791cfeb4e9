#include "server/model_registry.h"

#include "absl/strings/cord.h"
#include "base/str_cat.h"
#include "spdlog/spdlog.h"

namespace hearth::server {

namespace {
constexpr char kModelLoadFailure[] = "hearth.server/model_load_failure";
}  // namespace

bool is_model_load_failure(const absl::Status& status) {
  return status.GetPayload(kModelLoadFailure).has_value();
}

const char* model_state_name(ModelState s) {
  switch (s) {
    case ModelState::kLoading:
      return "LOADING";
    case ModelState::kServing:
      return "SERVING";
    case ModelState::kDraining:
      return "DRAINING";
    case ModelState::kFailed:
      return "FAILED";
  }
  return "?";
}

ModelRegistry::ModelRegistry(std::vector<ModelSpec> specs) {
  for (ModelSpec& s : specs)
    entries_.push_back(ModelEntry{std::move(s), ModelState::kLoading, "", nullptr});
}

ModelRegistry::~ModelRegistry() = default;

absl::Status ModelRegistry::load_all(
    kernels::ThreadPool* kernel_pool, bool keep_going,
    const std::function<void(const std::string&, ModelState)>& on_state, StepObserver* steps,
    const std::function<bool()>& stop_requested) {
  absl::Status first_error;
  std::size_t n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = entries_.size();
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (stop_requested && stop_requested())
      return absl::CancelledError(str_cat("loading stopped before model ", i + 1, " of ", n));
    ModelSpec spec;
    {
      std::lock_guard<std::mutex> lock(mu_);
      spec = entries_[i].spec;
    }
    const Clock::time_point t0 = Clock::now();
    absl::StatusOr<std::unique_ptr<ModelPool>> pool = ModelPool::load(spec, kernel_pool, steps);
    ModelState state;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pool.ok()) {
        entries_[i].pool = pool->get();
        owned_.push_back(std::move(*pool));
        entries_[i].state = ModelState::kServing;
      } else {
        entries_[i].state = ModelState::kFailed;
        entries_[i].error = std::string(pool.status().message());
        if (first_error.ok()) first_error = pool.status();
      }
      state = entries_[i].state;
    }
    if (state == ModelState::kServing) {
      spdlog::info("model '{}' ready: {} instance(s) loaded and warmed in {:.2f} s", spec.name,
                   spec.instances, std::chrono::duration<double>(Clock::now() - t0).count());
    } else {
      spdlog::error("{}", std::string(first_error.message()));
    }
    if (on_state) on_state(spec.name, state);
    if (!first_error.ok() && !keep_going) return first_error;
  }
  return first_error;
}

absl::StatusOr<ModelPool*> ModelRegistry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const ModelEntry& e : entries_) {
    if (e.spec.name == name) {
      switch (e.state) {
        case ModelState::kServing:
          return const_cast<ModelPool*>(e.pool);
        case ModelState::kLoading:
          return absl::UnavailableError(str_cat("model '", name, "' is still loading"));
        case ModelState::kDraining:
          return absl::UnavailableError(
              str_cat("model '", name, "' is not accepting requests: the server is shutting down"));
        case ModelState::kFailed: {  // until the server restarts: no retry helps
          absl::Status failed = absl::FailedPreconditionError(
              str_cat("model '", name, "' failed to load: ", e.error));
          failed.SetPayload(kModelLoadFailure, absl::Cord());
          return failed;
        }
      }
    }
  }
  return not_found(name);
}

absl::Status ModelRegistry::not_found(const std::string& name) const {
  std::string names;
  for (const ModelEntry& e : entries_)
    names += str_cat(names.empty() ? "'" : ", '", e.spec.name, "'");
  if (name.empty())  // a required field left out, as the HTTP API says it
    return absl::InvalidArgumentError(str_cat("model: missing (serving: ", names, ")"));
  return absl::NotFoundError(
      str_cat("model: no model named '", name, "' is served (serving: ", names, ")"));
}

absl::StatusOr<ModelEntry> ModelRegistry::entry(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (const ModelEntry& e : entries_)
    if (e.spec.name == name) return e;
  return not_found(name);
}

void ModelRegistry::drain_all() {
  std::lock_guard<std::mutex> lock(mu_);
  for (ModelEntry& e : entries_) {
    if (e.state == ModelState::kServing || e.state == ModelState::kLoading)
      e.state = ModelState::kDraining;
  }
  for (auto& p : owned_) p->drain();
}

bool ModelRegistry::wait_idle(Clock::time_point deadline) const {
  bool idle = true;
  for (ModelPool* p : pools()) idle = p->wait_idle(deadline) && idle;
  return idle;
}

std::vector<ModelEntry> ModelRegistry::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_;
}

std::vector<ModelPool*> ModelRegistry::pools() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ModelPool*> out;
  for (auto& p : owned_) out.push_back(p.get());
  return out;
}

}  // namespace hearth::server
