# CPython frames (python/, docs/python.md).
# The layout table against Debian's libpython3.11-dev headers, where they are.
if(EXISTS /usr/include/python3.11/internal/pycore_frame.h)
  snapprof_add_test_cases(EXE python_layout SOURCES test_python_layout.c)
  target_include_directories(python_layout PRIVATE /usr/include/python3.11)
  # Python's headers are not written for our warnings.
  target_compile_options(python_layout PRIVATE -Wno-unused-parameter -Wno-missing-field-initializers)
endif()
# The handler's checked read of code objects, on our own memory.
snapprof_add_test_cases(EXE python_capture SOURCES test_python_capture.c)
# Real /usr/bin/python3.11 under `snapprof record --python`, read back with
# go tool pprof (tests/python/check_python.py; skipped without them, and in
# sanitizer builds, as the other record tests: LD_PRELOAD of a sanitized
# library into python3.11 cannot work, the sanitizer runtime must load first).
if(SNAPPROF_SANITIZE)
  set(python_build sanitized)
else()
  set(python_build plain)
endif()
foreach(mode shares heldout young recursion churn faulthandler altstack unknown off wall heap)
  add_test(NAME python_frames_${mode}
           COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/check_python.py
                   $<TARGET_FILE:snapprof_cli> ${mode} ${python_build})
  set_tests_properties(python_frames_${mode} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600
    LABELS preload)
endforeach()
# The two that judge shares of CPU time against time.thread_time() are
# attribution tests: alone on the machine, and only in the plain suite.
set_tests_properties(python_frames_shares python_frames_heldout PROPERTIES
  LABELS "preload;accuracy" RUN_SERIAL TRUE)
# Its chains' code objects are freed ~40 ms of CPU after they are made:
# whole chains need the sampling thread's early drain in time, which a
# test beside it on the 2 CPUs can delay (CI runs 14 and 20: 73.8 % and
# 93.4 % whole, where alone it gives 99.1-99.97 %). Alone, but in every suite.
set_tests_properties(python_frames_churn PROPERTIES RUN_SERIAL TRUE)
# Under a seccomp filter that refuses process_vm_readv (python_frames_refused):
# the static launcher of the record_seccomp tests (preload.cmake), which
# sanitizer builds do not make.
if(NOT SNAPPROF_SANITIZE)
  add_test(NAME python_frames_refused
           COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/check_python.py
                   $<TARGET_FILE:snapprof_cli> refused ${python_build})
  set_tests_properties(python_frames_refused PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600
    LABELS preload ENVIRONMENT "SNAPPROF_TEST_SECCOMP_EXEC=$<TARGET_FILE:seccomp_exec>")
endif()
# A C thread that runs native code and then calls back into Python
# (python_frames_callback*): its library, loaded by ctypes.
add_library(python_callback_lib MODULE test_python_callback_lib.c)
target_link_libraries(python_callback_lib PRIVATE Threads::Threads)
foreach(mode callback callback_refresh)
  add_test(NAME python_frames_${mode}
           COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/python/check_python.py
                   $<TARGET_FILE:snapprof_cli> ${mode} ${python_build})
  set_tests_properties(python_frames_${mode} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 600
    LABELS preload ENVIRONMENT "SNAPPROF_TEST_CALLBACK_LIB=$<TARGET_FILE:python_callback_lib>")
endforeach()
