// Status propagation for functions that return absl::Status or
// absl::StatusOr<T>, so an error passes up with its context unchanged and
// the success path reads straight down.
//
//   HEARTH_RETURN_IF_ERROR(expr);            expr is an absl::Status: returned
//                                            from the enclosing function if not ok.
//   HEARTH_ASSIGN_OR_RETURN(decl, expr);     expr is an absl::StatusOr<T>: its
//                                            status is returned if not ok, else
//                                            its value is moved into `decl`
//                                            (e.g. `auto x` or an existing lvalue).
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define HEARTH_STATUS_CONCAT_INNER_(a, b) a##b
#define HEARTH_STATUS_CONCAT_(a, b) HEARTH_STATUS_CONCAT_INNER_(a, b)

#define HEARTH_RETURN_IF_ERROR(expr)                                                         \
  do {                                                                                       \
    if (::absl::Status hearth_status_ = (expr); !hearth_status_.ok()) return hearth_status_; \
  } while (0)

#define HEARTH_ASSIGN_OR_RETURN(decl, expr) \
  HEARTH_ASSIGN_OR_RETURN_IMPL_(HEARTH_STATUS_CONCAT_(hearth_statusor_, __LINE__), decl, expr)

#define HEARTH_ASSIGN_OR_RETURN_IMPL_(tmp, decl, expr) \
  auto tmp = (expr);                                   \
  if (!tmp.ok()) return std::move(tmp).status();       \
  decl = std::move(tmp).value()
