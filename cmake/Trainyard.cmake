# The one helper that registers tests with CTest.
#
#   trainyard_test(NAME foo_test SOURCES foo_test.cc LIBS trainyard_core [LABELS unit])
#
# Every test links GoogleTest/GoogleMock and rapidcheck. Tests are labelled `unit`
# unless told otherwise (`e2e`, `fuzz`, ...); `make test` runs every label.
if(BUILD_TESTING)
  find_package(GTest REQUIRED)
  find_package(rapidcheck REQUIRED)
endif()

function(trainyard_test)
  if(NOT BUILD_TESTING)
    return()
  endif()
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  separate_arguments(test_flags UNIX_COMMAND "${TRAINYARD_TEST_CXX_FLAGS}")
  target_compile_options(${T_NAME} PRIVATE ${test_flags})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gmock GTest::gtest_main rapidcheck)
  target_compile_definitions(${T_NAME} PRIVATE
    TRAINYARD_SOURCE_DIR="${CMAKE_SOURCE_DIR}"
    TRAINYARD_BINARY_DIR="${CMAKE_BINARY_DIR}")
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  # Property tests draw from a fixed seed so that every run checks the same cases;
  # run a test binary by hand with RC_PARAMS="seed=N" to explore others.
  set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    ENVIRONMENT "RC_PARAMS=seed=20261129")
endfunction()

# A layer library: trainyard_library(NAME core SOURCES ... DEPS ...) defines
# `trainyard_<name>` with src/ on its include path.
function(trainyard_library)
  cmake_parse_arguments(L "" "NAME" "SOURCES;DEPS" ${ARGN})
  add_library(trainyard_${L_NAME} STATIC ${L_SOURCES})
  target_include_directories(trainyard_${L_NAME} PUBLIC ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(trainyard_${L_NAME} PUBLIC ${L_DEPS})
  if(TRAINYARD_FUZZ)
    target_compile_options(trainyard_${L_NAME} PRIVATE -fsanitize=fuzzer-no-link)
  endif()
endfunction()
