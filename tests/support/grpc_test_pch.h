// The precompiled header of the test programs that link gRPC
// (tests/CMakeLists.txt): the plain test header plus gRPC and hearth's
// generated API.
#pragma once

#include <grpcpp/grpcpp.h>

#include "hearth/v1/inference.grpc.pb.h"
#include "tests/support/test_pch.h"
