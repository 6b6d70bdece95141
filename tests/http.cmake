# `snapprof record --http` (issue 28): the endpoint asked with curl and
# go tool pprof, one ctest test per case of test_http.sh. Preload tests:
# they skip (77) under the sanitizers, and without libmicrohttpd or curl.
add_executable(http_prog http_prog.c)
target_compile_options(http_prog PRIVATE ${SNAPPROF_WARNINGS})
target_link_libraries(http_prog PRIVATE Threads::Threads)
if(SNAPPROF_SANITIZE)
  set(SNAPPROF_HTTP_SANITIZED 1)
else()
  set(SNAPPROF_HTTP_SANITIZED 0)
endif()
if(MHD_FOUND)
  set(SNAPPROF_HTTP_MHD 1)
else()
  set(SNAPPROF_HTTP_MHD 0)
endif()
foreach(case go_pprof status_codes concurrency_bound program_closes_fds request_at_exit
    port_in_use heap_endpoints heap_params heap_bound not_served wall user_token flight
    client_gone slow_headers)
  add_test(NAME http_${case}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_http.sh ${case} $<TARGET_FILE:snapprof_cli>
            $<TARGET_FILE:http_prog> ${SNAPPROF_HTTP_SANITIZED} ${SNAPPROF_HTTP_MHD})
  set_tests_properties(http_${case} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 240
    LABELS preload ENVIRONMENT "SNAPPROF_PRELOAD_LIB=$<TARGET_FILE:snapprof_preload>")
endforeach()
# Without -o: nothing armed between requests (issue 28; test_http_ondemand.sh).
foreach(case idle_request_idle flight_quiet trigger_given with_output)
  add_test(NAME http_ondemand_${case}
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_http_ondemand.sh ${case}
            $<TARGET_FILE:snapprof_cli> $<TARGET_FILE:http_prog> ${SNAPPROF_HTTP_SANITIZED}
            ${SNAPPROF_HTTP_MHD})
  set_tests_properties(http_ondemand_${case} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 240
    LABELS preload ENVIRONMENT "SNAPPROF_PRELOAD_LIB=$<TARGET_FILE:snapprof_preload>")
endforeach()
