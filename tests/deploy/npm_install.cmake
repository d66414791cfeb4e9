# ctest deploy.npm_install: installs the npm packages the deploy checks use
# (package.json + package-lock.json, copied into the build tree) with `npm ci`.
# Run as: cmake -DNPM=... -DDIR=... -P npm_install.cmake
# Skips the install when node_modules already matches the lock file.
if(NOT NPM OR NPM MATCHES "NOTFOUND$")
  message(FATAL_ERROR "deploy tests: npm was not found when configuring. Install Node.js and npm "
                      "(Debian: apt-get install nodejs npm) and re-run cmake.")
endif()
set(stamp "${DIR}/node_modules/.package-lock.json")
if(EXISTS "${stamp}" AND NOT "${DIR}/package-lock.json" IS_NEWER_THAN "${stamp}")
  message(STATUS "deploy tests: ${DIR}/node_modules is up to date with package-lock.json")
  return()
endif()
message(STATUS "deploy tests: npm ci in ${DIR} (kubernetes-models, @kubernetes-models/prometheus-operator, yaml)")
execute_process(
  COMMAND "${NPM}" ci --no-audit --no-fund --ignore-scripts --fetch-retries=1 --fetch-timeout=30000
  WORKING_DIRECTORY "${DIR}"
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 240)
if(NOT rc EQUAL 0)
  execute_process(COMMAND "${NPM}" config get registry OUTPUT_VARIABLE registry OUTPUT_STRIP_TRAILING_WHITESPACE)
  message(FATAL_ERROR "deploy tests: `npm ci` failed (${rc}): the manifest checks need the npm packages of "
                      "tests/deploy/package-lock.json from the npm registry (${registry}). Is it reachable?\n"
                      "${out}\n${err}")
endif()
message(STATUS "${out}")
