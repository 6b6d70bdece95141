# The library's layering, read from its sources (check_layers.py: the
# layer table, each folder's interface headers, the file sublayers of
# module_cache/ and preload/ with no circle of calls among their files,
# no include cycle, and the violations allowed until the structure pass of
# issue 26 is merged). Prints each violation.
add_test(NAME library_follows_layers
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/check_layers.py ${PROJECT_SOURCE_DIR})
