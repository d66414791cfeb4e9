# The npm_install fixture tests of the Node.js suites (deploy.npm_install,
# http.npm_install): installs the npm packages a suite uses (its package.json
# + package-lock.json, copied into the build tree) with `npm ci`.
# Run as: cmake -DNPM=... -DDIR=... -DSUITE=NAME -DLOCK_FILE=SOURCE_LOCK [-DPACKAGES=WHAT] -P npm_install.cmake
#   SUITE       the suite's name in messages ("deploy tests")
#   LOCK_FILE   the lock file in the source tree, named when the install fails
#   PACKAGES    what is installed, for the log ("kubernetes-models, yaml")
# Skips the install when node_modules already matches the lock file.
if(NOT SUITE)
  set(SUITE "npm tests")
endif()
if(NOT NPM OR NPM MATCHES "NOTFOUND$")
  message(FATAL_ERROR "${SUITE}: npm was not found when configuring. Install Node.js and npm "
                      "(Debian: apt-get install nodejs npm) and re-run cmake.")
endif()
set(stamp "${DIR}/node_modules/.package-lock.json")
if(EXISTS "${stamp}" AND NOT "${DIR}/package-lock.json" IS_NEWER_THAN "${stamp}")
  message(STATUS "${SUITE}: ${DIR}/node_modules is up to date with package-lock.json")
  return()
endif()
if(PACKAGES)
  set(what " (${PACKAGES})")
endif()
message(STATUS "${SUITE}: npm ci in ${DIR}${what}")
execute_process(
  COMMAND "${NPM}" ci --no-audit --no-fund --ignore-scripts --fetch-retries=1 --fetch-timeout=30000
  WORKING_DIRECTORY "${DIR}"
  RESULT_VARIABLE rc
  OUTPUT_VARIABLE out
  ERROR_VARIABLE err
  TIMEOUT 240)
if(NOT rc EQUAL 0)
  execute_process(COMMAND "${NPM}" config get registry OUTPUT_VARIABLE registry OUTPUT_STRIP_TRAILING_WHITESPACE)
  message(FATAL_ERROR "${SUITE}: `npm ci` failed (${rc}): they need the npm packages of "
                      "${LOCK_FILE} from the npm registry (${registry}). Is it reachable?\n"
                      "${out}\n${err}")
endif()
message(STATUS "${out}")
