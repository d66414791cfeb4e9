// TLS on and off, bearer-token authentication on and off. The certificate is
// made at test time with openssl (self-signed, for localhost and 127.0.0.1).
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/server/test_util.h"

namespace hearth::testing {
namespace {

constexpr char kOpenssl[] = "/usr/bin/openssl";
using Metadata = std::vector<std::pair<std::string, std::string>>;

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

struct Cert {
  std::string cert_path, key_path, cert_pem;
};

// A self-signed certificate and key in the scratch directory; `name` keeps
// several apart.
Cert make_cert(const std::string& name) {
  Cert c;
  c.cert_path = (scratch_dir() / (name + ".crt")).string();
  c.key_path = (scratch_dir() / (name + ".key")).string();
  const ProcessResult r =
      run_process(kOpenssl, {"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", c.key_path,
                             "-out", c.cert_path, "-days", "2", "-subj", "/CN=localhost", "-addext",
                             "subjectAltName=DNS:localhost,IP:127.0.0.1"});
  EXPECT_EQ(r.exit_code, 0) << "openssl failed: " << r.err;
  c.cert_pem = read_text(c.cert_path);
  return c;
}

std::shared_ptr<grpc::Channel> tls_channel(const std::string& target, const std::string& root_pem) {
  grpc::SslCredentialsOptions opts;
  opts.pem_root_certs = root_pem;
  return grpc::CreateChannel(target, grpc::SslCredentials(opts));
}

// ListModels with the given metadata; a short deadline, since a refused
// connection would otherwise be retried until the deadline.
grpc::Status list_models(const std::shared_ptr<grpc::Channel>& ch, const Metadata& md = {},
                         milliseconds timeout = seconds(10)) {
  auto stub = make_stub(ch);
  grpc::ClientContext ctx;
  set_deadline(ctx, kUnderSanitizer ? timeout * 4 : timeout);
  for (const auto& [k, v] : md) ctx.AddMetadata(k, v);
  v1::ListModelsResponse resp;
  return stub->ListModels(&ctx, v1::ListModelsRequest(), &resp);
}

// Every hearth.v1 RPC with the given metadata: their statuses, by name.
std::vector<std::pair<std::string, grpc::Status>> call_every_rpc(
    const std::shared_ptr<grpc::Channel>& ch, const Metadata& md) {
  auto stub = make_stub(ch);
  std::vector<std::pair<std::string, grpc::Status>> out;
  auto ctx = [&](grpc::ClientContext& c) {
    set_deadline(c);
    for (const auto& [k, v] : md) c.AddMetadata(k, v);
  };
  v1::GenerateRequest gen = make_request("demo", "hello", 3);
  {
    grpc::ClientContext c;
    ctx(c);
    auto reader = stub->Generate(&c, gen);
    v1::GenerateResponse msg;
    while (reader->Read(&msg)) {
    }
    out.emplace_back("Generate", reader->Finish());
  }
  {
    grpc::ClientContext c;
    ctx(c);
    v1::CompleteResponse r;
    out.emplace_back("Complete", stub->Complete(&c, gen, &r));
  }
  {
    grpc::ClientContext c;
    ctx(c);
    v1::TokenizeRequest req;
    req.set_model("demo");
    req.set_text("hello");
    v1::TokenizeResponse r;
    out.emplace_back("Tokenize", stub->Tokenize(&c, req, &r));
  }
  {
    grpc::ClientContext c;
    ctx(c);
    v1::DetokenizeRequest req;
    req.set_model("demo");
    req.add_token_ids(300);
    v1::DetokenizeResponse r;
    out.emplace_back("Detokenize", stub->Detokenize(&c, req, &r));
  }
  {
    grpc::ClientContext c;
    ctx(c);
    v1::ListModelsResponse r;
    out.emplace_back("ListModels", stub->ListModels(&c, v1::ListModelsRequest(), &r));
  }
  {
    grpc::ClientContext c;
    ctx(c);
    v1::GetModelRequest req;
    req.set_model("demo");
    v1::ModelInfo r;
    out.emplace_back("GetModel", stub->GetModel(&c, req, &r));
  }
  return out;
}

void expect_every_rpc(const std::shared_ptr<grpc::Channel>& ch, const Metadata& md,
                      grpc::StatusCode code, const std::string& what) {
  for (const auto& [rpc, status] : call_every_rpc(ch, md))
    EXPECT_EQ(status.error_code(), code) << what << ": " << rpc << " " << status_text(status);
}

Metadata bearer(const std::string& token) { return {{"authorization", "Bearer " + token}}; }

class ServerTlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kOpenssl)) GTEST_SKIP() << "needs " << kOpenssl << " to make a certificate";
    cert_ = make_cert("server");
    ASSERT_FALSE(cert_.cert_pem.empty());
  }
  Cert cert_;
};

TEST_F(ServerTlsTest, TlsClientsWorkAndPlaintextClientsFail) {
  ServerProcess server;
  HEARTH_START_SERVER(server,
                      server_args({"--tls-cert", cert_.cert_path, "--tls-key", cert_.key_path}));
  const std::string port = std::to_string(server.grpc_port());
  // By IP (the certificate's IP SAN) and by name (its DNS SAN).
  for (const std::string& target : {"127.0.0.1:" + port, "localhost:" + port}) {
    SCOPED_TRACE(target);
    auto ch = tls_channel(target, cert_.cert_pem);
    expect_every_rpc(ch, {}, grpc::StatusCode::OK, "TLS client");
    int serving = -1;
    const grpc::Status h = health_check(ch, "", &serving);
    EXPECT_TRUE(h.ok()) << status_text(h);
    EXPECT_EQ(serving, kServing);
  }
  const grpc::Status plain = list_models(plain_channel(server.grpc_address()), {}, seconds(5));
  EXPECT_FALSE(plain.ok()) << "a plaintext client reached a TLS server";
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << status_text(plain);
  // A client that trusts another certificate refuses this server.
  const Cert other = make_cert("other");
  const grpc::Status untrusted =
      list_models(tls_channel(server.grpc_address(), other.cert_pem), {}, seconds(5));
  EXPECT_EQ(untrusted.error_code(), grpc::StatusCode::UNAVAILABLE) << status_text(untrusted);
}

TEST_F(ServerTlsTest, PlaintextServerRefusesTlsClients) {
  ServerProcess server;
  HEARTH_START_SERVER(server, server_args());
  EXPECT_TRUE(list_models(plain_channel(server.grpc_address())).ok());
  const grpc::Status tls =
      list_models(tls_channel(server.grpc_address(), cert_.cert_pem), {}, seconds(5));
  EXPECT_EQ(tls.error_code(), grpc::StatusCode::UNAVAILABLE) << status_text(tls);
}

TEST_F(ServerTlsTest, TlsAndTokenTogether) {
  ServerProcess server;
  HEARTH_START_SERVER(server, server_args({"--tls-cert", cert_.cert_path, "--tls-key",
                                           cert_.key_path, "--auth-token", "tls-token"}));
  auto ch = tls_channel(server.grpc_address(), cert_.cert_pem);
  expect_every_rpc(ch, bearer("tls-token"), grpc::StatusCode::OK, "TLS with the token");
  expect_every_rpc(ch, {}, grpc::StatusCode::UNAUTHENTICATED, "TLS without a token");
}

TEST(ServerAuthTest, TokenRequiredOnInferenceButNotOnHealthOrReflection) {
  ServerProcess server;
  HEARTH_START_SERVER(server, server_args({"--auth-token", "s3cret-token"}));
  auto ch = plain_channel(server.grpc_address());
  expect_every_rpc(ch, {}, grpc::StatusCode::UNAUTHENTICATED, "no token");
  expect_every_rpc(ch, bearer("wrong"), grpc::StatusCode::UNAUTHENTICATED, "wrong token");
  expect_every_rpc(ch, bearer("s3cret-token-and-more"), grpc::StatusCode::UNAUTHENTICATED,
                   "token with a suffix");
  expect_every_rpc(ch, bearer("s3cret"), grpc::StatusCode::UNAUTHENTICATED, "token prefix");
  expect_every_rpc(ch, {{"authorization", "s3cret-token"}}, grpc::StatusCode::UNAUTHENTICATED,
                   "token without 'Bearer '");
  expect_every_rpc(ch, {{"authorization", "Basic s3cret-token"}}, grpc::StatusCode::UNAUTHENTICATED,
                   "another scheme");
  expect_every_rpc(ch, bearer("s3cret-token"), grpc::StatusCode::OK, "the right token");
  // Probes need no token.
  int serving = -1;
  grpc::Status h = health_check(ch, "", &serving);
  EXPECT_TRUE(h.ok()) << status_text(h);
  EXPECT_EQ(serving, kServing);
  h = health_check(ch, "demo", &serving);
  EXPECT_TRUE(h.ok()) << status_text(h);
  EXPECT_EQ(serving, kServing);
  std::vector<std::string> services;
  const grpc::Status r = reflection_list_services(ch, &services);
  EXPECT_TRUE(r.ok()) << status_text(r);
  EXPECT_NE(std::find(services.begin(), services.end(), "hearth.v1.Inference"), services.end());
}

// The file's first line, without its line end: a token written on Windows
// (CRLF) kept a '\r' that no client can send in a header.
TEST(ServerAuthTest, TokenFromAFileWithATrailingNewline) {
  const std::string file = (scratch_dir() / "token.txt").string();
  {
    std::ofstream out(file);
    out << "file-token-123\r\n";
  }
  ServerProcess server;
  HEARTH_START_SERVER(server, server_args({"--auth-token-file", file}));
  auto ch = plain_channel(server.grpc_address());
  expect_every_rpc(ch, bearer("file-token-123"), grpc::StatusCode::OK, "the file's token");
  expect_every_rpc(ch, {}, grpc::StatusCode::UNAUTHENTICATED, "no token");
  expect_every_rpc(ch, bearer("file-token-12"), grpc::StatusCode::UNAUTHENTICATED, "wrong token");
}

TEST(ServerAuthTest, NoTokenConfiguredMeansOpen) {
  ServerProcess server;
  HEARTH_START_SERVER(server, server_args());
  auto ch = plain_channel(server.grpc_address());
  expect_every_rpc(ch, {}, grpc::StatusCode::OK, "no token");
  expect_every_rpc(ch, bearer("anything"), grpc::StatusCode::OK, "an unneeded token");
}

}  // namespace
}  // namespace hearth::testing
