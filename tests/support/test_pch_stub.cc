// The one source of the targets that build the test programs' precompiled
// headers (hearth_test_pch in tests/CMakeLists.txt).
