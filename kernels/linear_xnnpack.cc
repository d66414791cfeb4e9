// The float path of Linear: XNNPACK's fully-connected operator (f32).
#include <xnnpack.h>

#include <cmath>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "kernels/linear_impl.h"

namespace hearth::kernels::internal {
namespace {

const char* xnn_status_name(xnn_status s) {
  switch (s) {
    case xnn_status_success:
      return "success";
    case xnn_status_uninitialized:
      return "uninitialized";
    case xnn_status_invalid_parameter:
      return "invalid parameter";
    case xnn_status_invalid_state:
      return "invalid state";
    case xnn_status_unsupported_parameter:
      return "unsupported parameter";
    case xnn_status_unsupported_hardware:
      return "unsupported hardware";
    case xnn_status_out_of_memory:
      return "out of memory";
  }
  return "unknown status";
}

// XNNPACK is initialised once per process and never deinitialised: operators
// may live as long as the process (models are shared).
xnn_status initialize_once() {
  static std::once_flag once;
  static xnn_status status = xnn_status_uninitialized;
  std::call_once(once, [] { status = xnn_initialize(/*allocator=*/nullptr); });
  return status;
}

}  // namespace

XnnpackFullyConnected::~XnnpackFullyConnected() {
  if (op != nullptr) xnn_delete_operator(op);
}

absl::Status xnnpack_create(const float* w, std::size_t n_out, std::size_t n_in,
                            XnnpackFullyConnected& out) {
  if (const xnn_status s = initialize_once(); s != xnn_status_success)
    return absl::InternalError(absl::StrCat("xnn_initialize failed: ", xnn_status_name(s)));
  xnn_operator_t op = nullptr;
  // Kernel layout [output_channels][input_channels] is W as given (no
  // XNN_FLAG_TRANSPOSE_WEIGHTS); no bias; no clamping.
  const xnn_status s = xnn_create_fully_connected_nc_f32(
      /*input_channels=*/n_in, /*output_channels=*/n_out, /*input_stride=*/n_in,
      /*output_stride=*/n_out, w, /*bias=*/nullptr, -INFINITY, INFINITY, /*flags=*/0, &op);
  if (s != xnn_status_success)
    return absl::InternalError(absl::StrCat("xnn_create_fully_connected_nc_f32(n_in=", n_in,
                                            ", n_out=", n_out, ") failed: ", xnn_status_name(s)));
  out.op = op;
  return absl::OkStatus();
}

absl::Status xnnpack_run(XnnpackFullyConnected& fc, const float* x, std::size_t m, float* y,
                         pthreadpool_t threadpool) {
  std::lock_guard<std::mutex> lock(fc.mu);
  xnn_status s = xnn_setup_fully_connected_nc_f32(fc.op, m, x, y, threadpool);
  if (s != xnn_status_success)
    return absl::InternalError(absl::StrCat("xnn_setup_fully_connected_nc_f32(batch=", m,
                                            ") failed: ", xnn_status_name(s)));
  s = xnn_run_operator(fc.op, threadpool);
  if (s != xnn_status_success)
    return absl::InternalError(
        absl::StrCat("xnn_run_operator(fully_connected) failed: ", xnn_status_name(s)));
  return absl::OkStatus();
}

}  // namespace hearth::kernels::internal
