#include "server/bearer_auth.h"

#include <algorithm>
#include <cctype>

namespace hearth::server {
namespace {

// Takes as long for a wrong token as for the right one, whatever the
// length of their common prefix.
bool constant_time_equal(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

}  // namespace

absl::Status check_bearer(std::optional<std::string_view> authorization, const std::string& token) {
  if (token.empty()) return absl::OkStatus();
  if (!authorization.has_value())
    return absl::UnauthenticatedError(
        "authorization: missing (send 'authorization: Bearer <token>')");
  // The scheme is case-insensitive (RFC 9110, 11.1); the token is not.
  constexpr std::string_view kBearer = "Bearer ";
  const bool scheme_ok =
      authorization->size() >= kBearer.size() &&
      std::equal(kBearer.begin(), kBearer.end(), authorization->begin(), [](char a, char b) {
        return std::tolower(static_cast<unsigned char>(a)) ==
               std::tolower(static_cast<unsigned char>(b));
      });
  if (!scheme_ok || !constant_time_equal(authorization->substr(kBearer.size()), token))
    return absl::UnauthenticatedError("authorization: invalid bearer token");
  return absl::OkStatus();
}

}  // namespace hearth::server
