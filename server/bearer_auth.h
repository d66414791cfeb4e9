// Bearer-token authentication, the same for every front end: with a token
// configured, a call must carry "Bearer <token>" (in gRPC's `authorization`
// metadata, in HTTP's Authorization header), compared in constant time.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace hearth::server {

// OK when `token` is empty (no auth) or `authorization` is "Bearer <token>";
// UNAUTHENTICATED naming what is wrong otherwise. `authorization` is the
// header's value, nullopt when the call carries none.
absl::Status check_bearer(std::optional<std::string_view> authorization, const std::string& token);

}  // namespace hearth::server
